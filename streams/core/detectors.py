"""Edge configuration: the secret detectors, built once from settings into the pure Redactor.

Three sources, in priority order (where spans overlap, the earlier rule wins):
1. the user's own patterns (RECALL_REDACT_PATTERNS), so a house token is named as the user says;
2. detect-secrets' detectors (their compiled `denylist` patterns, JWT's validity check, its
   false-positive heuristics) for the well-known key formats;
3. rules for what agent logs hold and detect-secrets misses or over-reaches on: private key
   *blocks* (it flags the BEGIN line only), basic-auth URLs (its pattern runs across quotes and
   JSON punctuation), `Authorization: Bearer …`, `export FOO_TOKEN=…` and `.env` lines, newer
   key formats (Anthropic, OpenAI project keys, fine-grained GitHub tokens, Google, Hugging Face,
   npm) and secret-named assignments whose value looks random ("high entropy in assignment
   context"; detect-secrets' keyword detector alone redacts every `password = "test"`).
detect-secrets imports `requests`, so it lives here, not in the pure projections package.
Detectors chosen for few false positives on code and prose: measured in bench/redaction.py and
tests/streams/test_detectors.py (git SHAs, UUIDs, lockfile hashes, base64 stay).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from detect_secrets.filters.heuristic import (
    is_potential_uuid,
    is_sequential_string,
    is_templated_secret,
)
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

from projections.errors import ConfigError
from projections.redaction import KIND, NO_REDACTION, KeyRule, Redactor, Rule


def cased(*words: str) -> tuple[str, ...]:
    """Hints for a case-insensitive pattern: each word as lower, Title and UPPER case."""
    out: list[str] = []
    for word in words:
        out.extend((word.lower(), word[:1].upper() + word[1:].lower(), word.upper()))
    return tuple(dict.fromkeys(out))


def any_case(word: str) -> tuple[str, ...]:
    """Every upper/lower spelling of `word` (`PassWord` as well as `password`): anchors for a
    word whose case a writer chooses freely; a short word, as the count is 2**len."""
    return tuple("".join(c) for c in itertools.product(*((ch.lower(), ch.upper()) for ch in word)))


# --- value checks (the false-positive side) ------------------------------------------------------

_PLACEHOLDER = re.compile(
    r"(?i)(?:x{3,}|\*{3,}|\.{3}|…|your[-_ ]?|changeme|change[-_]me|example|placeholder|dummy|"
    r"redacted|replace[-_]?me|insert[-_]|<[^>]*>|\{\{|\$\{|%\(|^\$|^%[A-Za-z_]|^&)")
#: What a real token never contains: documentation stand-ins (AKIAIOSFODNN7EXAMPLE, ACxxxx…).
_TOKEN_PLACEHOLDER = re.compile(r"(?i)x{5,}|\*{3,}|example|placeholder|dummy|(.)\1{7,}")
#: A secret word with a filler before it (`mypassword`, `test_token1`): an example's value.
_STAND_IN = re.compile(r"(?i)(?:my|your|the|some|test|fake|sample|default|demo)[-_]?"
                       r"(?:pass(?:word|wd)?|pwd|secret|token|key|api[-_]?key)s?\d{0,3}")
_ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?:\(\)?)?")
#: A value naming a secret rather than holding one: a type or variable (`PrivateKeyTypes`).
_NAMES_A_SECRET = re.compile(r"(?i)key|secret|token|passw|credential|private|auth")
_PATHLIKE = re.compile(r"(?:~|\.{1,2})?/|[A-Za-z]:\\")
_PLAIN_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^@\s]*\Z", re.IGNORECASE)
_WORDS = frozenset({"true", "false", "yes", "no", "none", "null", "nil", "undefined", "empty",
                    "required", "optional", "string", "secret", "password", "passwd", "pass",
                    "pwd", "pw", "token", "test", "user", "username"})


def entropy(value: str) -> float:
    """Shannon entropy of `value` in bits per character."""
    if not value:
        return 0.0
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def is_placeholder(value: str) -> bool:
    """Templates, references and stand-ins (`${X}`, `$X`, `<token>`, `xxxx`, `your-key`,
    `mypassword`), words, paths and URLs without credentials: what a secret-named variable holds
    when it is not one."""
    return (is_templated_secret(value) or _PLACEHOLDER.search(value) is not None
            or _STAND_IN.fullmatch(value) is not None
            or value.lower() in _WORDS or value.isdigit() or _PATHLIKE.match(value) is not None
            or _PLAIN_URL.match(value) is not None or len(set(value)) <= 2)


def is_token(value: str) -> bool:
    """A well-known token format's match that is not a documentation stand-in."""
    return _TOKEN_PLACEHOLDER.search(value) is None


def is_jwt(value: str) -> bool:
    """detect-secrets' JWT validity check (base64url parts, JSON header and payload)."""
    return is_token(value) and bool(JwtTokenDetector.is_formally_valid(value))


def looks_random(value: str) -> bool:
    """A value in a secret-named assignment counts when it looks machine-made: long enough,
    letters and digits, high entropy, not an attribute path, sequence, UUID, placeholder or
    a name that itself says key/secret/token (a type or a variable, not a value)."""
    return (len(value) >= 10 and any(c.isdigit() for c in value)
            and any(c.isalpha() for c in value) and entropy(value) >= 3.0
            and not is_placeholder(value) and _ATTRIBUTE.fullmatch(value) is None
            and _NAMES_A_SECRET.search(value) is None
            and not is_sequential_string(value) and not is_potential_uuid(value))


def is_env_secret(value: str) -> bool:
    """The value of a secret-named environment variable: anything but a placeholder, from 8
    characters (`DB_PASSWORD=hunter22` is a secret whatever its entropy)."""
    return len(value) >= 8 and not is_placeholder(value) and not is_potential_uuid(value)


def is_credential(value: str) -> bool:
    """A bearer credential or a URL password: not a placeholder."""
    return not is_placeholder(value)


def is_bearer_token(value: str) -> bool:
    return len(value) >= 16 and any(c.isdigit() for c in value) and not is_placeholder(value)


def is_session_cookie(value: str) -> bool:
    """A login cookie's value: bearer-like, not a UUID (a session id that names a record)."""
    return is_bearer_token(value) and not is_potential_uuid(value)


# --- the catalogue -------------------------------------------------------------------------------

_DS = "detect-secrets"


def _plugin_rules(plugin: type, kind: str, hints: Sequence[tuple[str, ...]], *,
                  groups: Sequence[int] | None = None, bounded: bool = True) -> list[Rule]:
    """One rule per pattern of a detect-secrets detector (`hints[i]` for `denylist[i]`). The
    secret is the whole match unless `groups` says otherwise (detect-secrets reports the first
    group, which for a prefix alternation like `(ghp|gho)_…` is only the prefix)."""
    # ASCII classes: detect-secrets' `\w`/`\b` would take `我` or `é` for part of a token.
    patterns = [_ascii(p) for p in plugin.denylist]  # type: ignore[attr-defined]
    if len(patterns) != len(hints):
        raise AssertionError(f"{plugin.__name__} has {len(patterns)} patterns; the catalogue "
                             f"lists hints for {len(hints)} (detect-secrets changed: review it)")
    return [Rule(kind, pattern, group=g, hints=h, bounded=bounded, check=is_token,
                 origin=f"{_DS}:{plugin.__name__}")
            for pattern, h, g in zip(patterns, hints, groups or [0] * len(patterns), strict=True)]


def _ascii(pattern: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(pattern.pattern, (pattern.flags & ~re.UNICODE) | re.ASCII)


def library_rules() -> list[Rule]:
    """detect-secrets' detectors for well-known formats. Left out: its generic keyword, entropy,
    IP, basic-auth and private-key-line detectors (the agent-log rules below replace those), the
    IBM/SoftLayer/Cloudant/Artifactory ones (generic `key = <n chars>` shapes named after one
    vendor, or matches that include the surrounding quotes), and Discord and Telegram (patterns
    with no literal anchor: every string pays for them, and they match inside long ids)."""
    return [
        *_plugin_rules(AWSKeyDetector, "aws-access-key",
                       [("A3T", "ABIA", "ACCA", "AKIA", "ASIA"), cased("aws")], groups=[0, 1]),
        *_plugin_rules(AzureStorageKeyDetector, "azure-storage-key", [("AccountKey=",)]),
        *_plugin_rules(GitHubTokenDetector, "github-token", [("ghp_", "gho_", "ghu_", "ghs_",
                                                             "ghr_")]),
        *_plugin_rules(GitLabTokenDetector, "gitlab-token", [
            ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-"), ("GR1348941",), ("glcbt-",),
            ("glimt-",), ("glptt-",), ("glagent-",), ("gloas-",)]),
        *_plugin_rules(SlackDetector, "slack-token", [cased("xox"), cased("hooks.slack.com")]),
        *_plugin_rules(StripeDetector, "stripe-key", [("k_live_",)]),
        *_plugin_rules(OpenAIDetector, "openai-key", [("T3BlbkFJ",)]),
        # detect-secrets' JWT pattern ends lazily (it matches header.payload only); the same
        # shape with the signature, judged by its own validity check (base64url JSON parts).
        Rule("jwt", re.compile(r"eyJ[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+(?:\.[A-Za-z0-9_+/=-]*)?"),
             hints=("eyJ",), bounded=True, check=is_jwt,
             origin=f"{_DS}:JwtTokenDetector"),
        *_plugin_rules(SendGridDetector, "sendgrid-key", [("SG.",)]),
        *_plugin_rules(PypiTokenDetector, "pypi-token", [("pypi-",), ("pypi-",)]),
        *_plugin_rules(NpmDetector, "npm-token", [("_authToken",)], groups=[1], bounded=False),
        *_plugin_rules(SquareOAuthDetector, "square-oauth", [("sq0csp-",)]),
        *_plugin_rules(MailchimpDetector, "mailchimp-key", [("-us",)]),
        *_plugin_rules(TwilioKeyDetector, "twilio-key", [("AC",), ("SK",)]),
    ]


_SECRET_WORDS = (r"api[_-]?key|apikey|secret(?:[_-]?key)?|client[_-]?secret|passw(?:or)?d|pwd|"
                 r"passphrase|"
                 r"(?:access|auth|refresh|bearer|session|api)?[_-]?token|private[_-]?key|"
                 r"access[_-]?key|credentials?|auth[_-]?key|signing[_-]?key|encryption[_-]?key")
#: A key that *ends* in a secret word: `db_password`, `apiKey`, `GITHUB_TOKEN` — not `tokenCount`.
SECRET_KEY = re.compile(rf"(?i)[A-Za-z0-9_.-]*?(?:{_SECRET_WORDS})")
#: The same words case-sensitively in their usual spellings (snake, camel, UPPER); the rule is
#: anchored at the word's first letters (an alternation tried at every position, let alone an
#: IGNORECASE one, costs 10-40x more on agent logs). The key may have any prefix (`db_password`).
_KEY_QUALIFIERS = ("api", "Api", "API", "private", "Private", "PRIVATE", "access", "Access",
                   "ACCESS", "auth", "Auth", "AUTH", "signing", "Signing", "SIGNING", "encryption",
                   "Encryption", "ENCRYPTION", "secret", "Secret", "SECRET")
_KEY_WORD = ("(?:" + "|".join(_KEY_QUALIFIERS) + r")[_-]?(?:key|Key|KEY)|apikey|APIKEY|"
             r"[Ss]ecret|SECRET|(?i:passw(?:or)?d|passphrase)|[Pp]wd|PWD|[Tt]oken|TOKEN|"
             r"[Cc]redentials?|CREDENTIALS?")
#: Hints of the key rule (JSON keys): the words such a key ends with. Of the assignment rule:
#: the words' starts (it is anchored there).
_KEY_HINTS = cased("key", "secret", "password", "passwd", "pwd", "token", "credential",
                   "credentials", "passphrase")
_ASSIGNMENT_HINTS = tuple(dict.fromkeys((*_KEY_QUALIFIERS, "apikey", "APIKEY",
                                         *any_case("passw"), *any_case("passp"),
                                         *cased("pwd", "token", "credential"))))
#: A secret-named environment variable: one of its `_`-separated words is TOKEN, SECRET,
#: PASSWORD… or it ends in a qualified KEY (`OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`) — so not
#: `MAX_TOKENS`, `TOKENIZERS_PARALLELISM` or `KEY_PATH`. The match starts at that word (the rule
#: is anchored at it); the words before it are the rest of the name.
_ENV_WORDS = ("TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PWD", "PASS", "APIKEY",
              "CREDENTIAL", "CREDENTIALS", "PASSPHRASE")
_ENV_QUALIFIERS = ("API", "ACCESS", "PRIVATE", "SECRET", "CLIENT", "SERVICE", "ACCOUNT", "SIGNING",
                   "ENCRYPTION", "MASTER", "APP", "AUTH", "LICENSE")
_ENV = re.compile(
    r"(?<![A-Za-z0-9])(?:" + "|".join(sorted(_ENV_WORDS, key=len, reverse=True)) + "|(?:"
    + "|".join(_ENV_QUALIFIERS) + r")_KEY)(?:_[A-Z0-9]+)*="
    r"(?P<q>[\"']?)(?P<value>[^\s\"'`\\;]+)(?P=q)")
_ENV_HINTS = ("TOKEN", "SECRET", "PWD", "PASS", "APIKEY", "CREDENTIAL",
              *(f"{q}_KEY" for q in _ENV_QUALIFIERS))


def agent_log_rules() -> list[Rule]:
    """What agent logs hold and detect-secrets misses (see the module docstring)."""
    def own(kind: str, pattern: str, *, flags: int = 0,
            group: int | str | tuple[str, ...] | None = None,
            hints: tuple[str, ...] = (), bounded: bool = False,
            check: object = None, anchored: bool = False) -> Rule:
        return Rule(kind, re.compile(pattern, flags), group=group, hints=hints, bounded=bounded,
                    check=check, origin="recall", anchored=anchored)  # type: ignore[arg-type]

    return [
        # The whole block, body included; a block cut short (no END line) to its last base64 line.
        # Line breaks may be real or escaped once or more (`\n`, `\\n`: a quoted string inside a
        # string, as a tool's JSON output quoted again).
        own("private-key",
            r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:(?:\\+[nr]|\s)+(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+:[^\n\\]*))+"
            r"(?:(?:\\+[nr]|\s)+-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----)?",
            hints=("PRIVATE KEY",)),
        own("anthropic-key", r"sk-ant-[a-z]+[0-9]*-[A-Za-z0-9_-]{32,}", hints=("sk-ant-",),
            bounded=True),
        own("openai-key", r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}",
            hints=("sk-proj-", "sk-svcacct-", "sk-admin-"), bounded=True),
        own("openai-key", r"sk-[A-Za-z0-9]{48}", hints=("sk-",), bounded=True),
        own("github-token", r"github_pat_[A-Za-z0-9_]{22,255}", hints=("github_pat_",),
            bounded=True),
        own("google-api-key", r"AIza[0-9A-Za-z_-]{35}", hints=("AIza",), bounded=True),
        own("huggingface-token", r"hf_[A-Za-z0-9]{34,40}", hints=("hf_",), bounded=True),
        own("npm-token", r"npm_[A-Za-z0-9]{36}", hints=("npm_",), bounded=True),
        # detect-secrets' live-key pattern takes exactly 24 characters; newer keys run to ~100.
        own("stripe-key", r"(?:sk|rk)_(?:test|live)_[0-9a-zA-Z]{24,}",
            hints=("k_test_", "k_live_"), bounded=True),
        own("slack-token", r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+", hints=("xapp-",), bounded=True),
        # refresh and configuration tokens (`xoxe-1-…`, `xoxe.xoxp-1-…`): not in detect-secrets
        own("slack-token", r"xoxe(?:\.xox[a-z])?-\d+-[A-Za-z0-9-]{20,}", hints=("xoxe",),
            bounded=True),
        own("google-oauth-token", r"ya29\.[0-9A-Za-z_-]{20,}", hints=("ya29.",), bounded=True),
        # scheme://user:PASSWORD@host — only the password; user and host stay searchable. The
        # user may be empty (`redis://:pw@cache`); the password may hold `/`, `#`, `@`, `?`
        # (written raw, as people do): it runs to the first `@host` that ends the authority, and
        # a port (`host:8080/…`) is not a password.
        own("basic-auth",
            r"://[^\s:/?#@\"'<>{}\[\]\\]*:(?!\d{1,5}(?:[/?#]|$))"
            r"(?P<pw>[^\s\"'<>{}\[\]\\]+?)"
            r"@(?:[A-Za-z0-9._~%-]++|\[[0-9A-Fa-f:.]++\])(?::\d*+)?(?=[/?#\s\"'<>\\,;)]|$)",
            group="pw", hints=("://",), check=is_credential, anchored=True),
        own("bearer-token",
            r"(?i)authorization\b[\"']?\s*[:=]\s*[\"']?(?:bearer|token|basic)\s+"
            r"(?P<v>[A-Za-z0-9._~+/-]{8,}=*)",
            group="v", hints=cased("authorization"), check=is_credential, anchored=True),
        own("bearer-token", r"(?i)(?<![A-Za-z0-9])bearer\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)",
            group="v", hints=cased("bearer"), check=is_bearer_token, anchored=True),
        # a login cookie by its usual names (`Cookie: sessionid=…`, `PHPSESSID`, `JSESSIONID`,
        # `connect.sid`, `_app_session`, `session-token`); not `session_id=`, which in agent logs
        # names a conversation.
        own("session-cookie",
            r"(?i)(?:sessionid|sessid|\.sid|_session|session[_-]?token)[\"']?[ \t]*=[ \t]*"
            r"[\"']?(?P<v>[^\s;,\"'\\&]{16,})",
            group="v", hints=(*cased("session", "sessid"), ".sid"), check=is_session_cookie),
        # export FOO_TOKEN=…, .env lines, `FOO_PASSWORD=… cmd`: the name decides, not entropy.
        Rule("env-secret", _ENV, group="value", hints=_ENV_HINTS, check=is_env_secret,
             origin="recall", anchored=True),
        # password = "…", "apiKey": "…", secret: … — the value must look machine-made. Quotes
        # may be escaped (`\"password\":\"…\"`: JSON quoted in a tool's output or a parked line).
        own("secret-assignment",
            rf"(?:{_KEY_WORD})\\*[\"']?\]?[ \t]*"
            r"(?::=|=>|[:=])[ \t]*(?:\\*(?P<q>[\"'`])(?P<quoted>[^\s\"'`\\]{10,})\\*(?P=q)"
            r"|(?P<bare>[^\s\"'`\\,;()\[\]{}<>]{10,})(?![^\s\"'`\\,;)\]}<>]))",
            group=("quoted", "bare"), hints=_ASSIGNMENT_HINTS, check=looks_random, anchored=True),
    ]


def custom_rules(patterns: Mapping[str, str]) -> list[Rule]:
    """RECALL_REDACT_PATTERNS: kind → regex (its first group is the secret, else the match)."""
    rules: list[Rule] = []
    for kind, source in sorted(patterns.items()):
        if not isinstance(kind, str) or not KIND.fullmatch(kind):
            raise ConfigError(f"RECALL_REDACT_PATTERNS: kind {kind!r} must be lowercase words "
                              "joined by '-' (it becomes the marker [redacted:<kind>])")
        try:
            compiled = re.compile(source)
        except (re.error, TypeError) as exc:
            raise ConfigError(f"RECALL_REDACT_PATTERNS[{kind!r}] is not a valid regular "
                              f"expression: {exc}") from None
        if compiled.fullmatch(""):
            raise ConfigError(f"RECALL_REDACT_PATTERNS[{kind!r}] matches the empty string")
        rules.append(Rule(kind, compiled, origin="settings"))
    return rules


def allow_list(patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    """RECALL_REDACT_ALLOW: regexes; a found value matching one entirely is left as it is."""
    out: list[re.Pattern[str]] = []
    for source in patterns:
        try:
            out.append(re.compile(source))
        except (re.error, TypeError) as exc:
            raise ConfigError(f"RECALL_REDACT_ALLOW entry {source!r} is not a valid regular "
                              f"expression: {exc}") from None
    return tuple(out)


def default_redactor() -> Redactor:
    """The built-in rules with no settings (what RECALL_REDACT=on gives by default)."""
    return make_redactor()


def make_redactor(patterns: Mapping[str, str] | None = None,
                  allow: Sequence[str] = ()) -> Redactor:
    """The redactor of the given custom patterns and allow-list, on top of the built-in rules."""
    own = agent_log_rules()
    # Containers first (a key block holds base64 that other rules might name piecemeal), then
    # the specific formats, then the context rules whose values may hold one of those.
    rules = [*custom_rules(patterns or {}), *own[:1], *library_rules(), *own[1:]]
    key_rule = KeyRule("secret-assignment", SECRET_KEY, looks_random, hints=_KEY_HINTS)
    return Redactor(tuple(rules), key_rule, allow_list(allow))


def build_redactor(settings: object) -> Redactor:
    """The redactor that `settings` (streams.core.settings.Settings) ask for."""
    if not getattr(settings, "redact", True):
        return NO_REDACTION
    return make_redactor(getattr(settings, "redact_patterns", None) or {},
                         getattr(settings, "redact_allow", None) or ())
