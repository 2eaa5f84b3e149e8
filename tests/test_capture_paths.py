"""Paths in captured text: relative to the project root, never a home folder (issue 19)."""

from __future__ import annotations

from memoryd.core.capture.extraction import extract
from memoryd.core.capture.paths import ProjectPaths
from memoryd.core.capture.transcript import Message, ToolCall, ToolResult

ROOT = "/Users/dain/workspace/coderabbit-review-helper"
PATHS = ProjectPaths(ROOT, "/Users/dain")


def test_paths_under_the_root_are_relative_and_the_home_is_never_named() -> None:
    assert PATHS(f"Edited {ROOT}/pyproject.toml") == "Edited pyproject.toml"
    assert PATHS(f"cd {ROOT} && uv tool install .") == "cd . && uv tool install ."
    assert PATHS(f"{ROOT}-old/x.py") == "~/workspace/coderabbit-review-helper-old/x.py"
    # A traceback from the user's own bin folder, and another machine's home in a plan path.
    assert PATHS('File "/Users/dain/.local/bin/coderabbit-extract"') == (
        'File "~/.local/bin/coderabbit-extract"'
    )
    assert PATHS("saved to: /home/cboos/.claude/plans/x.md") == "saved to: ~/.claude/plans/x.md"


def test_findings_store_paths_relative_to_the_project() -> None:
    messages = [
        Message(
            role="assistant",
            agent="claude",
            offset=1,
            tool_calls=(ToolCall("c1", "Bash", {"command": f"cd {ROOT} && coderabbit-extract"}),),
        ),
        Message(
            role="tool",
            agent="claude",
            offset=2,
            tool_results=(
                ToolResult(
                    "c1",
                    True,
                    f'Traceback:\n  File "{ROOT}/x.py", line 4\nModuleNotFoundError: No module',
                ),
            ),
        ),
    ]
    (error,) = extract(messages, paths=PATHS)
    assert ROOT not in error.content and "/Users/" not in error.content
    assert error.content.startswith("`cd . && coderabbit-extract` failed: ModuleNotFoundError")
