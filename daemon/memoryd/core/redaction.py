"""Redaction: secrets become ``[REDACTED:<kind>]`` before anything is persisted (design §6).

Known credential formats are found by pattern rules, unknown ones by a Shannon-entropy check;
two structures are found by code (`curl -u user:password`, a Kubernetes `kind: Secret`'s data).
A placeholder (`ghp_xxxx…`, `AKIA…EXAMPLE`, `<password>`, `${VAR}`) is not a secret, nor is an
address at a reserved or no-reply domain. Every pattern is linear in practice: quantifiers are
bounded or cannot overlap (tests/test_redaction_corpus.py feeds each family a 256 KB input;
bench/redaction.py times them and measures recall and false positives on the corpus).
Rules are data (``SecretRule``), so rules from the configuration can be appended to
``DEFAULT_RULES`` and passed to ``redact_with``. Redaction is pure and idempotent.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

ENTROPY_BITS = 4.0  # bits per char above which an unknown token may be a secret
ENTROPY_MIN_LEN = 21  # design §6: "tokens > 20 chars"
# A replacement cannot create a match in practice; the next pass proves it, and the bound keeps
# a pathological input from looping.
_MAX_PASSES = 3


@dataclass(frozen=True)
class SecretRule:
    """One kind of secret: ``pattern`` finds it and its group ``group`` is replaced (so an
    assignment keeps its key). ``hints``: lower-case strings one of which every match contains;
    the rule is skipped when the lowered text has none (a substring test is ~100× cheaper than a
    regex scan, and most text holds no secret). Empty: always run. ``check``: when given, a match
    whose replaced text it rejects is skipped (placeholders such as ``AKIAXXXXXXXXXXXXXXXX``)."""

    kind: str
    pattern: re.Pattern[str]
    group: int = 0
    hints: tuple[str, ...] = ()
    check: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class Redaction:
    """The redacted text and the kinds replaced, in order of first appearance."""

    text: str
    kinds: tuple[str, ...]


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# Markers already in the text are claimed before any rule runs, so no rule (a user's included)
# can match inside one: that is what makes redaction idempotent.
_MARKER = re.compile(r"\[REDACTED:[\w.\-]*\]")


def _rule(
    kind: str,
    pattern: str,
    hints: str = "",
    group: int = 0,
    check: Callable[[str], bool] | None = None,
) -> SecretRule:
    return SecretRule(kind, re.compile(pattern), group, tuple(hints.split()), check)


# Placeholders: what documentation and templates put where a secret goes. A value is one when it
# holds a placeholder word, is a bare word that names the thing (`password`, `token`), or repeats
# too few characters to be random (`xxxx…`, `AKIA0000…`, `12312312…`).
_PLACEHOLDER_WORDS = (
    "xxxx", "your", "placeholder", "redacted", "replace", "changeme", "changeit",
    "dummy", "sample", "here", "<", ">", "***", "...", "###", "fake", "insert", "todo",
)  # fmt: skip
_PLACEHOLDER_VALUES = frozenset(
    "password passwd pass pwd secret token test admin root user username guest none null nil "
    "true false foo bar foobar 1234 12345 123456 12345678 qwerty letmein default".split()
)
_TEMPLATE = re.compile(r"[$%]\{*\s*[\w(.]|\{\{|[<\[%]")  # $VAR ${VAR} $(cmd) {{ x }} <x> [x] %X%


def placeholder(value: str) -> bool:
    """Whether ``value`` stands for a secret rather than being one."""
    low = value.lower().strip("\"'`")
    if not low or low in _PLACEHOLDER_VALUES or _TEMPLATE.match(low):
        return True
    # `…EXAMPLE` at the end is AWS's documentation convention; inside, it may be chance.
    if low.endswith("example") or any(word in low for word in _PLACEHOLDER_WORDS):
        return True
    if len(low) < 8:
        return len(set(low)) <= 2
    return shannon_entropy(value) < min(2.5, math.log2(len(value)) - 1.5)


def _real(value: str) -> bool:
    return not placeholder(value)


def _credential(value: str) -> bool:
    """A value under a credential-named key: real, and a digit or at least 12 characters (a word
    of 8 under `token:` is more often a name than a secret)."""
    return _real(value) and (len(value) >= 12 or any(c.isdigit() for c in value))


# Pieces of the context rules. A value is not code or a template (`password: str`,
# `token=os.environ[...]`, `${VAR}`, `<your-key>`, `****`, a path) and is not prose
# (`password: must be rotated`): those are what agents talk about most.
# `=`, `:`, `:=`, `::=`, `?=`, `+=`, `.=`, `=>`; a YAML block scalar (`key: |`) is followed by its
# value on the next line.
_ASSIGN = r"""["']?\s*(?:=>|:{1,3}=|[?+.]?=|:)(?:[ \t]*[|>][-+]?[ \t]*(?=\n))?\s*["'`]?"""
_END = r"""(?![^\s,;()\[\]}"'])"""  # the identifier ends here: a call, index or delimiter
_NOT_VALUE = (
    r"(?-i:(?!(?:str|bytes|int|None|null|nil|true|false|undefined|string|SecretStr|Optional|Any)\b"
    r"|[$%{<*/~.]|[a-z_][a-z0-9_]*(?:\.[A-Za-z_]\w*)+" + _END + r"|\w+\("
    r"|\w*(?i:pass|pwd|secret|token|key)\w*" + _END + "))"
)


def _value(min_len: int) -> str:
    """A quoted value runs to its closing quote (spaces allowed), a bare one to a delimiter and
    is not the first word of a sentence."""
    n = f"{{{min_len},}}"
    bare = rf"""(?![a-z]+[ \t]+[a-z])[^\s"'`,;)}}\]<]{n}"""
    quoted = rf"""(?<=")(?!\s)[^"\n]{n}|(?<=')(?!\s)[^'\n]{n}|(?<=`)(?!\s)[^`\n]{n}"""
    return _NOT_VALUE + rf"""({quoted}|{bare})"""


_B64 = r"[A-Za-z0-9_\-]"  # base64url
# Random tokens of these formats hold a digit and an upper-case letter; kebab-case words that
# share the prefix (`sk-learn-...`) do not.
_MIXED = r"(?=[A-Za-z0-9_\-]*[0-9])(?=[A-Za-z0-9_\-]*[A-Z])"
_AUTH = r"(?i)\bauthorization" + _ASSIGN
_SCHEME = r"(?:bearer|basic|(?:api-?)?token|bot|digest)\s+"
_CREDENTIAL = r"""(?![$%{<*])([^\s"',;)}\]]{8,})"""
_AWS_SECRET_KEYS = r"(?i)(?:aws_?secret_?(?:access_?)?key|secret_?access_?key)"
_AWS_SECRET = r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
# Bounded parts keep the scan linear: a local part is at most 64 characters and starts where a
# run of local-part characters starts (so a long run is tried once, not at every offset), a
# domain label at most 63 and no label can hold the dot that ends it.
_EMAIL = (
    r"(?<![\w.%+\-])(?!git@)[A-Za-z0-9._%+\-]{1,64}@(?![1-4]x\.)"
    r"(?:[A-Za-z0-9\-]{1,63}\.){1,8}[A-Za-z]{2,24}\b"
)
# Addresses that reach nobody: reserved names (RFC 2606/6761) and no-reply senders.
_NOBODY = re.compile(
    r"(?i)(?:^|[.@])(?:example\.(?:com|org|net|edu)|[\w\-]+\.(?:example|test|invalid|localhost))$"
    r"|no-?reply"
)


def _somebody(address: str) -> bool:
    return not _NOBODY.search(address)


_PASSWORD_KEYS = r"(?i)(?:password|passwd|passphrase|\bpwd)"
_SECRET_KEYS = (
    r"(?i)(?:api[_-]?key|secret(?:[_-]?key)?|token|access[_-]?key|auth[_-]?key"
    r"|private[_-]?key|client[_-]?secret)"
)

# Order is priority: where matches overlap the earlier rule wins, so specific formats come
# before the context rules (an `api_key=ghp_...` is reported as a github_token).
DEFAULT_RULES: tuple[SecretRule, ...] = (
    # An unterminated block (a truncated paste) is redacted to the end: better too much.
    _rule(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        "-----begin",
    ),
    _rule(
        "slack_webhook",
        r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/([\w/+\-]{20,})",
        "hooks.slack",
        group=1,
        check=_real,
    ),
    _rule(
        "discord_webhook",
        r"https://(?:\w+\.)?discord(?:app)?\.com/api/webhooks/\d+/[\w\-]+",
        "discord",
    ),
    # Access key ids only: AIDA/AROA/... are public user and role ids.
    _rule(
        "aws_access_key",
        r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
        "akia asia abia acca a3t",
        check=_real,
    ),
    _rule(
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_\w{30,255})\b",
        "ghp_ gho_ ghu_ ghs_ ghr_ github_pat_",
        check=_real,
    ),
    # GitLab's token prefixes (docs.gitlab.com, "token prefixes"); routable ones end `.xxxxxxxxx`.
    _rule(
        "gitlab_token",
        rf"\b(?:gl(?:pat|dt|rt|ptt|cbt|ffct|ft|imt|agent|oas|soat)-|GR1348941){_B64}{{20,}}"
        r"(?:\.[0-9a-z]{9}\b)?|\b_gitlab_session=[0-9a-z]{32}\b",
        "glpat- gldt- glrt- glptt- glcbt- glffct- glft- glimt- glagent- gloas- glsoat- gr1348941 "
        "_gitlab_session=",
        check=_real,
    ),
    # Slack's token shapes: numeric team/user ids, then the random part; configuration and
    # refresh tokens are long; legacy workspace tokens short.
    _rule(
        "slack_token",
        r"\bxox[abposre]-(?:\d-)?(?:\d{8,14}-){1,3}(?=[0-9\-]*[A-Za-z])[A-Za-z0-9][A-Za-z0-9\-]{7,}"
        r"|\bxox[os]-\d+-\d+-\d+-[a-fA-F\d]{8,}\b"
        r"|\bxoxe\.xox[bp]-\d-[A-Za-z0-9]{100,}|\bxoxe-\d-[A-Za-z0-9]{100,}"
        r"|\bxox[ar]-(?:\d-)?(?=[A-Za-z]*\d)[A-Za-z0-9]{8,48}\b"
        r"|(?i:\bxapp-\d-[A-Z0-9]+-\d+-[A-Z0-9]+)",
        "xox xapp-",
        check=_real,
    ),
    _rule(
        "age_secret_key",
        r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b",
        "age-secret-key-1",
        check=_real,
    ),
    _rule(
        "onepassword_token",
        r"\bops_eyJ[A-Za-z0-9+/]{100,}={0,3}|\bA3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})"
        r"(?:-[A-Z0-9]{5}){3}\b",
        "ops_eyj a3-",
        check=_real,
    ),
    # Azure AD client secrets: three characters, a digit, `Q~`, then 31–34 more.
    _rule(
        "azure_client_secret",
        r"(?<![\w~.\-])[\w~.]{3}\dQ~[\w~.\-]{31,34}(?![\w~.\-])",
        "q~",
        check=_real,
    ),
    _rule("linear_key", r"\blin_api_[A-Za-z0-9]{40}\b", "lin_api_", check=_real),
    _rule("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", "shp", check=_real),
    _rule(
        "dynatrace_token", r"\bdt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}\b", "dt0c01.", check=_real
    ),
    _rule(
        "sourcegraph_token",
        r"\bsgp_(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40}\b",
        "sgp_",
        check=_real,
    ),
    _rule(
        "stripe_key",
        r"\b(?:[sr]k_(?:live|test)|whsec)_[A-Za-z0-9]{16,}",
        "k_live_ k_test_ whsec_",
        check=_real,
    ),
    _rule("anthropic_key", rf"\bsk-ant-{_B64}{{20,}}", "sk-ant-"),
    _rule("openai_key", rf"\bsk-(?:proj-|svcacct-|admin-)?{_MIXED}{_B64}{{20,}}", "sk-"),
    _rule("google_api_key", rf"\bAIza{_B64}{{35}}(?![\w\-])", "aiza"),
    _rule("google_oauth", rf"\bya29\.{_B64}{{20,}}|\b1//0{_B64}{{30,}}", "ya29. 1//0"),
    _rule("huggingface_token", r"\bhf_(?=\w*[A-Z])(?=\w*[a-z])[A-Za-z0-9]{30,}\b", "hf_"),
    _rule("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b", "npm_", check=_real),
    _rule("pypi_token", rf"\bpypi-AgE{_B64}{{20,}}", "pypi-age"),
    # No useful hint ("sk", "ac" are everywhere), so the literal leads to keep the scan fast.
    _rule("twilio_key", r"(?:SK|AC)(?<=\b..)[0-9a-f]{32}\b"),
    _rule("sendgrid_key", rf"\bSG\.{_B64}{{16,}}\.{_B64}{{16,}}", "sg."),
    _rule("digitalocean_token", r"\bdo[por]_v1_[0-9a-f]{64}\b", "_v1_"),
    _rule("discord_token", rf"[MNO](?<=\b.){_B64}{{23,27}}\.{_B64}{{6}}\.{_B64}{{27,40}}"),
    _rule("telegram_bot_token", rf"\d(?<!\d\d)\d{{7,9}}:AA{_B64}{{33}}(?![\w\-])", ":aa"),
    _rule("jwt", rf"\beyJ{_B64}{{10,}}\.{_B64}{{10,}}\.{_B64}{{10,}}", "eyj"),
    # Only the password goes: the host and user are what a memory about a database needs.
    _rule("connection_string", r"://[^\s:/@]*:([^\s@/]+)@", "://", group=1, check=_real),
    _rule("aws_secret_key", _AWS_SECRET_KEYS + _ASSIGN + _AWS_SECRET, "secret", group=1),
    _rule(
        "azure_storage_key", r"(?i)\b(?:Account|SharedAccess)Key=([\w+/=]{20,})", "key=", group=1
    ),
    # After a scheme the value is a credential (code builds it from a variable: `{`, `$`, `"`).
    _rule(
        "authorization_header",
        _AUTH + _SCHEME + _CREDENTIAL,
        "authorization",
        group=1,
        check=_real,
    ),
    _rule("authorization_header", _AUTH + _value(8), "authorization", group=1, check=_real),
    # NuGet and .NET configuration: `<add key="ClearTextPassword" value="…" />`.
    _rule(
        "password_assignment",
        r"""(?i)<add\s+key="[^"\n]{0,40}?(?:password|passwd|secret|token|api_?key)[^"\n]{0,40}"\s+"""
        r'value="([^"\n]{6,})"',
        "<add",
        group=1,
        check=_real,
    ),
    _rule(
        "password_assignment",
        _PASSWORD_KEYS + _ASSIGN + _value(3),
        "pass pwd",
        group=1,
        check=_real,
    ),
    # Key names end at the keyword: `max_tokens=` or `token_count:` are not secrets.
    _rule(
        "generic_secret",
        _SECRET_KEYS + _ASSIGN + _value(8),
        "key secret token",
        group=1,
        check=_credential,
    ),
    # An element named for a credential: `<apiToken>…</apiToken>`.
    _rule(
        "generic_secret",
        r"(?i)<([\w.\-]{0,40}(?:token|secret|password|passwd|api_?key|access_?key))>"
        r"[ \t\n]*([^<\s]{8,})[ \t\n]*</\1>",
        "token secret pass key",
        group=2,
        check=_credential,
    ),
    # `git@github.com` is an SSH remote, `icon@2x.png` an image, `user@example.com` nobody.
    _rule("email", _EMAIL, "@", check=_somebody),
)

# Entropy candidates: runs of the base64/base64url alphabet, `=` only as padding (so in
# `name=value` the value is the token). Skipped: URLs up to their query string (credentials in
# them are connection_string's), and public digests and keys: lockfile integrity
# (`sha512-...`), go.sum (`h1:...`), SSH public keys.
_TOKEN = re.compile(rf"[A-Za-z0-9+/_\-]{{{ENTROPY_MIN_LEN},}}={{0,2}}")
_URL = re.compile(r"://[^\s?#\"'<>]*")
_SRI = ("sha1-", "sha256-", "sha384-", "sha512-")
_PUBLIC_BEFORE = re.compile(r"(?:h1:|(?:ssh-(?:rsa|ed25519|dss)|ecdsa-sha2-nistp\d+) )$")
_HEX = re.compile(r"[0-9a-fA-F\-]+")
# Tracking parameters of links (ad-click ids, mail campaign ids): random, but no credential.
_TRACKING = re.compile(
    r"(?i)[?&;#](?:utm_\w+|gclid|gbraid|wbraid|dclid|fbclid|msclkid|yclid|igshid|mc_cid|mc_eid"
    r"|_hsenc|_hsmi|_ga|_gl|ref_src|s_cid|mkt_tok|oly_enc_id|oly_anon_id|vero_id)=$"
)
# Word pieces of an identifier: `parseHTTPResponse2` → parse, HTTP, Response, 2.
_PIECE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_VOWELS = frozenset("aeiouyAEIOUY")
_CONSONANTS = re.compile(r"[^aeiouy]{4,}", re.IGNORECASE)  # "strength" is rare, "xkcd" random


def shannon_entropy(text: str) -> float:
    """Bits per character of ``text``'s own character distribution."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def _mixed_classes(token: str) -> bool:
    # A random token this long almost surely mixes all three; paths, snake_case, hex and
    # base32 do not.
    return (
        any(c.isdigit() for c in token)
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
    )


def _word(piece: str) -> bool:
    pronounceable = not _VOWELS.isdisjoint(piece) and not _CONSONANTS.search(piece)
    return len(piece) >= 3 and piece.isalpha() and pronounceable


def _wordy(token: str) -> bool:
    """An identifier or a path: long pieces (random text switches case every two characters or
    so), most of them pronounceable."""
    pieces = _PIECE.findall(token)
    total = sum(map(len, pieces))
    return total >= 3 * len(pieces) and sum(len(p) for p in pieces if _word(p)) >= 0.6 * total


def _base64_of_text(token: str) -> bool:
    body = token.rstrip("=")
    if len(body) % 4 == 1:
        return False
    altchars = b"-_" if "-" in body or "_" in body else None
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=altchars, validate=True)
    except (binascii.Error, ValueError):
        return False
    return sum(32 <= b < 127 or b in (9, 10, 13) for b in raw) >= 0.9 * len(raw)


def looks_like_secret(token: str) -> bool:
    """The entropy check for one token, cheapest tests first."""
    return (
        len(token) >= ENTROPY_MIN_LEN
        and _mixed_classes(token)
        and not _HEX.fullmatch(token)  # git SHAs, UUIDs, digests: hex is never flagged
        and shannon_entropy(token) > ENTROPY_BITS
        and not _wordy(token)
        and not _base64_of_text(token)
    )


def _entropy_spans(text: str) -> Iterator[tuple[int, int]]:
    urls = [m.span() for m in _URL.finditer(text)] if "://" in text else []
    url_ends = [end for _, end in urls]
    for match in _TOKEN.finditer(text):
        start, end = match.span()
        i = bisect.bisect_right(url_ends, start)
        if i < len(urls) and urls[i][0] <= start:
            continue
        if _TRACKING.search(text, max(0, start - 16), start):
            continue
        before = max(0, start - 24)  # room for "ecdsa-sha2-nistp521 "
        public = match.group().startswith(_SRI) or _PUBLIC_BEFORE.search(text, before, start)
        if not public and looks_like_secret(match.group()):
            yield start, end


# `curl -u user:password` / `--user=…`: the password goes (or the one side given when the other
# is empty); the argument is a run of quoted and bare pieces.
_CURL_USER = re.compile(
    r"""(?<![\w-])(?:-u|--user)(?:=|[ \t]+)((?:"[^"\n]*"|'[^'\n]*'|[^\s"'])+)"""
)
_QUOTES = "\"'"


def _unquoted(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in _QUOTES:
        start += 1
    while end > start and text[end - 1] in _QUOTES:
        end -= 1
    return start, end


def _curl_user_spans(text: str) -> Iterator[tuple[int, int]]:
    for match in _CURL_USER.finditer(text):
        colon = match.group(1).find(":")
        if colon < 0:
            continue
        split = match.start(1) + colon
        user = _unquoted(text, match.start(1), split)
        password = _unquoted(text, split + 1, match.end(1))
        for start, end in (password,) if password[0] < password[1] else (user,):
            if start < end and _real(text[start:end]):
                yield start, end


# A Kubernetes `kind: Secret` manifest: every value under its `data:` (base64, ≥ 10 characters)
# and `stringData:` (a credential) — base64 of a password is "base64 of text" to the entropy
# check, so only the manifest says it is a secret. Line-based, each block at most _K8S_LINES.
_K8S_KIND = re.compile(r"""(?im)^[ \t]*kind:[ \t]*["']?secret["']?[ \t]*$""")
_K8S_DATA = re.compile(r"(?m)^([ \t]*)(data|stringData):[ \t]*$")
_K8S_ENTRY = re.compile(r"[ \t]*[\w.\-]+:[ \t]*(\S.*?)?[ \t]*")
_K8S_BASE64 = re.compile(r"[A-Za-z0-9+/]{10,}={0,3}")
_K8S_LINES = 200


def _k8s_value(text: str, start: int, end: int, base64_only: bool) -> tuple[int, int] | None:
    start, end = _unquoted(text, start, end)
    value = text[start:end]
    ok = _K8S_BASE64.fullmatch(value) if base64_only else _credential(value)
    return (start, end) if ok else None


def _k8s_spans(text: str) -> Iterator[tuple[int, int]]:
    if not _K8S_KIND.search(text):
        return
    for block in _K8S_DATA.finditer(text):
        indent, base64_only = len(block.group(1)), block.group(2) == "data"
        pos, folded = block.end() + 1, False
        for _ in range(_K8S_LINES):
            if pos >= len(text):
                break
            eol = text.find("\n", pos)
            eol = len(text) if eol < 0 else eol
            line = text[pos:eol]
            body = line.lstrip(" \t")
            lead = len(line) - len(body)
            if body and not body.startswith("#"):
                if lead <= indent:
                    break
                span = None
                if folded:  # the line after `key: |` or `key: >`
                    span, folded = (
                        _k8s_value(text, pos + lead, pos + len(line.rstrip()), True),
                        False,
                    )
                elif entry := _K8S_ENTRY.fullmatch(line):
                    if entry.group(1) is None:
                        pass
                    elif entry.group(1)[0] in "|>":
                        folded = True
                    else:
                        span = _k8s_value(
                            text, pos + entry.start(1), pos + entry.end(1), base64_only
                        )
                if span:
                    yield span
            pos = eol + 1


def _claim(spans: list[tuple[int, int, str]], start: int, end: int, kind: str) -> None:
    """Add a span unless it overlaps one already claimed (``spans`` stays sorted)."""
    i = bisect.bisect_left(spans, (start, end, kind))
    if (i == 0 or spans[i - 1][1] <= start) and (i == len(spans) or spans[i][0] >= end):
        spans.insert(i, (start, end, kind))


@dataclass(frozen=True)
class _Prefilter:
    """A rule set's hints, each tested once per text (a substring test), and the rules each one
    lets run: a rule runs when one of its hints is present, as before, without a loop per rule
    over its hints (that loop was most of the cost of redacting text that holds no secret)."""

    rules: tuple[SecretRule, ...]
    by_hint: dict[str, frozenset[int]]  # hint → the indexes of the rules it lets run
    always: tuple[int, ...]  # rules without hints: they run on every text

    def live(self, lowered: str) -> list[int]:
        """The indexes of the rules to run on ``lowered``, in priority order."""
        present = [run for hint, run in self.by_hint.items() if hint in lowered]
        if not present:
            return list(self.always)
        return sorted(set(self.always).union(*present))


# Per rule set, kept with the tuple it was made from (the user's rules make another set).
_PREFILTERS: dict[int, _Prefilter] = {}


def _prefilter(rules: tuple[SecretRule, ...]) -> _Prefilter:
    known = _PREFILTERS.get(id(rules))
    if known is not None and known.rules is rules:
        return known
    by_hint: dict[str, set[int]] = {}
    for index, rule in enumerate(rules):
        for hint in rule.hints:
            by_hint.setdefault(hint, set()).add(index)
    always = tuple(i for i, rule in enumerate(rules) if not rule.hints)
    made = _Prefilter(rules, {h: frozenset(run) for h, run in by_hint.items()}, always)
    if len(_PREFILTERS) >= 16:
        _PREFILTERS.clear()
    _PREFILTERS[id(rules)] = made
    return made


def _find(text: str, rules: tuple[SecretRule, ...]) -> list[tuple[int, int, str]]:
    spans: list[tuple[int, int, str]] = []
    for match in _MARKER.finditer(text):
        _claim(spans, match.start(), match.end(), "")
    lowered = text.lower()
    for index in _prefilter(rules).live(lowered):
        rule = rules[index]
        for match in rule.pattern.finditer(text):
            start, end = match.span(rule.group)
            if rule.check is not None and start < end and not rule.check(text[start:end]):
                continue
            if start < end:  # (-1, -1) when the group did not take part
                _claim(spans, start, end, rule.kind)
    if "curl" in lowered:
        for start, end in _curl_user_spans(text):
            _claim(spans, start, end, "curl_credentials")
    if "secret" in lowered:
        for start, end in _k8s_spans(text):
            _claim(spans, start, end, "kubernetes_secret")
    for start, end in _entropy_spans(text):
        _claim(spans, start, end, "high_entropy")
    return [span for span in spans if span[2]]


def redact_with(text: str, rules: Iterable[SecretRule]) -> Redaction:
    """Redact ``text`` with ``rules`` (earlier ones win overlaps), then the entropy check."""
    ordered = tuple(rules)
    kinds: list[str] = []
    for _ in range(_MAX_PASSES):
        spans = _find(text, ordered)
        if not spans:
            break
        pieces: list[str] = []
        last = 0
        for start, end, kind in spans:
            pieces += [text[last:start], marker(kind)]
            kinds.append(kind)
            last = end
        text = "".join([*pieces, text[last:]])
    return Redaction(text, tuple(dict.fromkeys(kinds)))


def redact(text: str) -> Redaction:
    """Redact ``text`` with ``DEFAULT_RULES`` and the entropy check."""
    return redact_with(text, DEFAULT_RULES)
