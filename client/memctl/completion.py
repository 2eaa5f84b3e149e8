"""``memctl completion bash|zsh|fish``: shell completion generated from memctl's own parser, so
it always offers the commands, actions and options that exist (no hand-kept list)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memctl.cli import Session

Tree = dict[str, tuple[list[str], dict[str, list[str]]]]  # command → (options, action → options)


def _sub(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse offers no public walk of its tree
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """The long options, and the values a positional argument can take (``auto on|off``)."""
    words = {o for a in parser._actions for o in a.option_strings if o.startswith("--")}
    for action in parser._actions:
        if (
            not action.option_strings
            and action.choices
            and not isinstance(action, argparse._SubParsersAction)
        ):
            words |= {str(choice) for choice in action.choices}
    return sorted(words)


def tree(parser: argparse.ArgumentParser) -> Tree:
    """Each command with its options, and each action of a command with actions (bank, files,
    alias) with its own."""
    return {
        name: (_options(command), {a: _options(p) for a, p in _sub(command).items()})
        for name, command in _sub(parser).items()
    }


def bash(parser: argparse.ArgumentParser) -> str:
    commands = tree(parser)
    cases = []
    for name, (options, actions) in sorted(commands.items()):
        if actions:
            inner = "".join(
                f"            {shlex.quote(a)}) words={shlex.quote(' '.join(o))} ;;\n"
                for a, o in sorted(actions.items())
            )
            cases.append(
                f"        {shlex.quote(name)})\n"
                f'          if [ -z "$action" ]; then words={shlex.quote(" ".join(actions))}\n'
                f'          else case "$action" in\n{inner}          esac; fi ;;\n'
            )
        else:
            cases.append(
                f"        {shlex.quote(name)}) words={shlex.quote(' '.join(options))} ;;\n"
            )
    top = " ".join([*sorted(commands), *_options(parser)])
    return (
        '# memctl completion for bash: eval "$(memctl completion bash)"\n'
        "_memctl() {\n"
        '  local cur="${COMP_WORDS[COMP_CWORD]}" command="" action="" words="" i\n'
        "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
        '    case "${COMP_WORDS[i]}" in\n'
        "      --project|--timeout) ((i++)) ;;\n"
        "      -*) ;;\n"
        '      *) if [ -z "$command" ]; then command="${COMP_WORDS[i]}";'
        ' elif [ -z "$action" ]; then action="${COMP_WORDS[i]}"; fi ;;\n'
        "    esac\n"
        "  done\n"
        '  if [ -z "$command" ]; then\n'
        f"    words={shlex.quote(top)}\n"
        "  else\n"
        '    case "$command" in\n'
        f"{''.join(cases)}"
        "    esac\n"
        "  fi\n"
        '  COMPREPLY=($(compgen -W "$words" -- "$cur"))\n'
        "}\n"
        "complete -o default -F _memctl memctl\n"
    )


def zsh(parser: argparse.ArgumentParser) -> str:
    return (
        '# memctl completion for zsh: eval "$(memctl completion zsh)"\n'
        "autoload -U +X bashcompinit && bashcompinit\n" + bash(parser).split("\n", 1)[1]
    )


def fish(parser: argparse.ArgumentParser) -> str:
    commands = tree(parser)
    first = f"not __fish_seen_subcommand_from {' '.join(sorted(commands))}"
    lines = [
        "# memctl completion for fish: memctl completion fish | source",
        "complete -c memctl -f",
    ]
    for name, (options, actions) in sorted(commands.items()):
        after = f"__fish_seen_subcommand_from {name}"
        lines.append(f"complete -c memctl -n {shlex.quote(first)} -a {shlex.quote(name)}")
        lines += [f"complete -c memctl -n {shlex.quote(after)} -l {o[2:]}" for o in options]
        lines += [
            f"complete -c memctl -n {shlex.quote(after)} -a {shlex.quote(a)}"
            for a in sorted(actions)
        ]
    return "\n".join(lines) + "\n"


SHELLS = {"bash": bash, "zsh": zsh, "fish": fish}


def run(s: Session) -> None:
    from memctl.cli import _parser

    sys.stdout.write(SHELLS[s.args.shell](_parser()))
