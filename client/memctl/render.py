"""Short, readable human output for each command (``--json`` bypasses all of this)."""

from __future__ import annotations

from typing import Any


def _short(entry_id: str) -> str:
    return entry_id[:8]


def status(r: dict[str, Any]) -> str:
    d = r["daemon"]
    head = f"memoryd {d['version']} (protocol {d['protocol']}), pid {d['pid']}"
    lines = [f"{head}, up {d['uptime_s']:.0f}s"]
    if r.get("project"):
        p, e = r["project"], r["project"]["entries"]
        lines.append(f"project {p['root']} ({p['slug']})")
        lines.append(
            f"entries: {e['confirmed']} confirmed, {e['pinned']} pinned, "
            f"{e['candidate']} candidate, {e['archived']} archived"
        )
    slo = r["slo"]
    if slo.get("p95_ms") is not None:
        state = "degraded" if slo["degraded"] else "normal"
        lines.append(f"retrieval: p50 {slo['p50_ms']} ms, p95 {slo['p95_ms']} ms ({state})")
    for err in r.get("errors", []):
        lines.append(f"recent {err['severity']}: {err['description']}")
    return "\n".join(lines)


def remembered(r: dict[str, Any]) -> str:
    verb = "already remembered" if r["duplicate"] else "remembered"
    return f"{verb} {_short(r['id'])} ({r['status']})"


def search(r: dict[str, Any]) -> str:
    if not r["results"]:
        return "no results"
    return "\n".join(
        f"{_short(x['id'])}  {x['score']:7.3f}  [{x['category']}/{x['status']}]  {x['content']}"
        for x in r["results"]
    )


def listing(r: dict[str, Any]) -> str:
    if not r["entries"]:
        return "no entries"
    rows = [
        f"{_short(e['id'])}  [{e['category']}/{e['status']}]  {e['content']}" for e in r["entries"]
    ]
    if r["total"] > len(r["entries"]):
        rows.append(f"… {r['total'] - len(r['entries'])} more (use --limit)")
    return "\n".join(rows)


def forgotten(r: dict[str, Any]) -> str:
    return f"forgot {len(r['forgotten'])}: " + ", ".join(_short(i) for i in r["forgotten"])


def pinned(r: dict[str, Any]) -> str:
    return f"{_short(r['id'])} is {r['status']}"


def imported(r: dict[str, Any]) -> str:
    lines = [
        f"imported {r['imported']}, duplicates {r['duplicates']}, rejected {len(r['rejected'])}"
    ]
    lines += [f"  line {x['line']}: {x['reason']}" for x in r["rejected"][:20]]
    return "\n".join(lines)


def checked(r: dict[str, Any]) -> str:
    return f"database: {r['database']}\naudit: {r['audit']}\nindex: {r['index']}"


def injected(r: dict[str, Any]) -> str:
    return str(r["text"])


def budget(r: dict[str, Any]) -> str:
    note = "" if r["overridden"] else " (default)"
    return f"budget ceiling {r['ceiling']} tokens{note}"


def alias(r: dict[str, Any]) -> str:
    return f"{r['term']} → {', '.join(r['synonyms'])}"


def aliases(r: dict[str, Any]) -> str:
    return "\n".join(
        f"{a['term']} → {', '.join(a['synonyms'])}  [{a['source']}]" for a in r["aliases"]
    )


def auto(r: dict[str, Any]) -> str:
    state = "on" if r["enabled"] else "off"
    return f"auto-memory {state}, promotion preset {r['preset']}"


def episodes(r: dict[str, Any]) -> str:
    if not r["episodes"]:
        return "no episodes"
    return "\n".join(
        f"{e['id'][:8]}  [{e['agent']}] {e['title']} ({e['turns']} turns, {len(e['files'])} files)"
        for e in r["episodes"]
    )
