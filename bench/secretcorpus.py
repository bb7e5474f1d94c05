"""Bench and test support: planted secrets of every kind and a code-heavy corpus of look-alike
non-secrets (bench/redaction.py measures the detectors on them; the redaction tests import them
through tests/support/secretcorpus.py).

Every value is generated at test time from a seeded RNG (never a real credential). Token prefixes
are assembled from parts so that no complete token shape sits in this file.
"""

from __future__ import annotations

import base64
import hashlib
import random
import string
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
URLSAFE = ALNUM + "-_"


@dataclass(frozen=True)
class Planted:
    """A generated secret: its expected marker kind, the value, and a line that carries it."""

    kind: str
    value: str
    text: str


def _r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    # Always both letters and digits, so entropy-based checks see a machine-made value.
    while True:
        out = "".join(rng.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in out) and any(c.isalpha() for c in out):
            return out


def _b64url(value: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode()


def planted_secrets(seed: int = 18) -> list[Planted]:
    """One or more secrets of every kind the default rules name, each in a typical context."""
    rng = random.Random(seed)
    p = "-" * 5
    key_body = "\n".join(_r(rng, 64, ALNUM + "+/") for _ in range(6))
    jwt = ".".join([_b64url({"alg": "HS256", "typ": "JWT"}),
                    _b64url({"sub": _r(rng, 10), "iat": rng.randrange(10**9, 2 * 10**9)}),
                    _r(rng, 43, URLSAFE)])
    aws_id = "AK" + "IA" + _r(rng, 16, UPPER_ALNUM)
    aws_secret = _r(rng, 40, ALNUM + "/+")
    gh = "gh" + "p_" + _r(rng, 36)
    gh_fine = "github" + "_pat_" + _r(rng, 22) + "_" + _r(rng, 59)
    gitlab = "gl" + "pat-" + _r(rng, 20, URLSAFE)
    slack = "xo" + "xb-" + str(rng.randrange(10**11, 10**12)) + "-" + str(
        rng.randrange(10**12, 10**13)) + "-" + _r(rng, 24, LOWER_ALNUM)
    stripe = "sk" + "_live_" + _r(rng, 24)
    openai_legacy = "sk-" + _r(rng, 20) + "T3Blbk" + "FJ" + _r(rng, 20)
    openai_project = "sk-" + "proj-" + _r(rng, 48, URLSAFE)
    anthropic = "sk-" + "ant-api03-" + _r(rng, 93, URLSAFE)
    sendgrid = "S" + "G." + _r(rng, 22, URLSAFE) + "." + _r(rng, 43, URLSAFE)
    pypi = "pypi-" + "AgEIcHlwaS5vcmc" + _r(rng, 80, URLSAFE)
    npm = "np" + "m_" + _r(rng, 36)
    google = "AI" + "za" + _r(rng, 35, URLSAFE)
    hf = "h" + "f_" + _r(rng, 34)
    azure = _r(rng, 86, ALNUM + "+/") + "=="
    twilio = "S" + "K" + _r(rng, 32, LOWER_ALNUM)
    mailchimp = _r(rng, 32, LOWER_ALNUM) + "-us" + str(rng.randrange(1, 20))
    square = "sq0" + "csp-" + _r(rng, 43, URLSAFE)
    db_password = _r(rng, 18)
    bearer = _r(rng, 40, URLSAFE)
    env_token = _r(rng, 32)
    dotenv = _r(rng, 24)
    assigned = _r(rng, 24)
    json_key = _r(rng, 28)
    private_key = (f"{p}BEGIN RSA PRIVATE KEY{p}\n{key_body}\n{p}END RSA PRIVATE KEY{p}")
    return [
        Planted("aws-access-key", aws_id, f"aws configure set aws_access_key_id {aws_id}"),
        Planted("aws-access-key", aws_secret, f'aws_secret_access_key = "{aws_secret}"'),
        Planted("github-token", gh, f"git clone https://x-access-token:{gh}@github.com/o/r.git"),
        Planted("github-token", gh_fine, f"my fine-grained token is {gh_fine} please use it"),
        Planted("gitlab-token", gitlab, f"GITLAB auth: {gitlab}"),
        Planted("slack-token", slack, f"slack bot token {slack} for #alerts"),
        Planted("stripe-key", stripe, f"stripe.api_key = '{stripe}'"),
        Planted("openai-key", openai_legacy, f"old key {openai_legacy} still works?"),
        Planted("openai-key", openai_project, f"client = OpenAI(api_key='{openai_project}')"),
        Planted("anthropic-key", anthropic, f"use {anthropic} for the eval run"),
        Planted("jwt", jwt, f"the session cookie was {jwt}; decode it"),
        Planted("sendgrid-key", sendgrid, f"sendgrid: {sendgrid}"),
        Planted("pypi-token", pypi, f"twine upload -u __token__ -p {pypi} dist/*"),
        Planted("npm-token", npm, f"npm token created: {npm}"),
        Planted("google-api-key", google, f"maps key {google}"),
        Planted("huggingface-token", hf, f"huggingface-cli login --token {hf}"),
        Planted("azure-storage-key", azure, "DefaultEndpointsProtocol=https;AccountName=acct;"
                f"AccountKey={azure};EndpointSuffix=core.windows.net"),
        Planted("twilio-key", twilio, f"twilio api key {twilio}"),
        Planted("mailchimp-key", mailchimp, f"mailchimp {mailchimp}"),
        Planted("square-oauth", square, f"square secret {square}"),
        Planted("private-key", key_body.split("\n")[2], f"cat id_rsa\n{private_key}\n"),
        Planted("basic-auth", db_password,
                f"DATABASE_URL=postgres://app:{db_password}@db.internal:5432/prod"),
        Planted("bearer-token", bearer,
                f'curl -H "Authorization: Bearer {bearer}" https://api.internal/v1/me'),
        Planted("env-secret", env_token, f"export DEPLOY_TOKEN={env_token} && ./deploy.sh"),
        Planted("env-secret", dotenv, f"# .env\nDEBUG=false\nSTRIPE_WEBHOOK_SECRET={dotenv}\n"),
        Planted("secret-assignment", assigned, f'db = connect(host="db", password="{assigned}")'),
        Planted("secret-assignment", json_key, orjson.dumps({"api_key": json_key}).decode()),
        *_hostile(rng),
    ]


def _hostile(rng: random.Random) -> list[Planted]:
    """Forms an attack round found kept in clear: tokens glued to letters of other scripts,
    long Stripe keys, URL passwords with an empty user or holding `/`, `#`, `@`, a key block
    whose line breaks are escaped twice, and less common token and header shapes."""
    p = "-" * 5
    gh = "gh" + "p_" + _r(rng, 36)
    aws_cjk = "AK" + "IA" + _r(rng, 16, UPPER_ALNUM)
    aws_accent = "AK" + "IA" + _r(rng, 16, UPPER_ALNUM)
    slack = "xo" + "xp-" + str(rng.randrange(10**11, 10**12)) + "-" + _r(rng, 24, LOWER_ALNUM)
    jwt = ".".join([_b64url({"alg": "HS256", "typ": "JWT"}),
                    _b64url({"sub": _r(rng, 10), "iat": rng.randrange(10**9, 2 * 10**9)}),
                    _r(rng, 43, URLSAFE)])
    openai = "sk-" + "proj-" + _r(rng, 48, URLSAFE)
    gh_fine = "github" + "_pat_" + _r(rng, 22) + "_" + _r(rng, 59)
    stripe = "sk" + "_live_" + _r(rng, 99)
    restricted = "rk" + "_live_" + _r(rng, 100)
    redis_pw = _r(rng, 20)
    slash_pw = _r(rng, 8) + "/" + _r(rng, 8)
    odd_pw = _r(rng, 6) + "#" + _r(rng, 6) + "@" + _r(rng, 6)
    body = [_r(rng, 64, ALNUM + "+/") for _ in range(5)]
    escaped = "\\\\n".join(body)
    ya29 = "ya" + "29." + _r(rng, 120, URLSAFE)
    xoxe = "xo" + "xe-1-" + _r(rng, 140)
    cookie = _r(rng, 32, LOWER_ALNUM)
    mixed = _r(rng, 20)
    phrase = _r(rng, 26)
    return [
        Planted("github-token", gh, f"我的令牌是{gh}请保密"),
        Planted("aws-access-key", aws_cjk, f"密钥{aws_cjk}已过期"),
        Planted("aws-access-key", aws_accent, f"la clé{aws_accent} est révoquée"),
        Planted("slack-token", slack, f"令牌{slack}。"),
        Planted("jwt", jwt, f"会话{jwt}结束"),
        Planted("openai-key", openai, f"秘钥{openai}无效"),
        Planted("github-token", gh_fine, f"细粒度令牌{gh_fine}请轮换"),
        Planted("stripe-key", stripe, f"STRIPE key {stripe} (new format)"),
        Planted("stripe-key", restricted, f"restricted key: {restricted}"),
        Planted("basic-auth", redis_pw, f"REDIS_URL=redis://:{redis_pw}@cache:6379/0"),
        Planted("basic-auth", slash_pw, f"psql postgres://u:{slash_pw}@h/db"),
        Planted("basic-auth", odd_pw, f"amqp://svc:{odd_pw}@mq.internal:5672/vhost"),
        Planted("private-key", body[2], 'print(json.dumps(key)) -> "'
                f"{p}BEGIN PRIVATE KEY{p}\\\\n{escaped}\\\\n{p}END PRIVATE KEY{p}\\\\n\""),
        Planted("google-oauth-token", ya29, f"gcloud auth print-access-token\n{ya29}"),
        Planted("slack-token", xoxe, f"refresh_token rotated: {xoxe}"),
        Planted("session-cookie", cookie,
                f"curl -H 'Cookie: csrftoken=abc; sessionid={cookie}' https://app.internal/"),
        Planted("secret-assignment", mixed, f"ADMIN PassWord={mixed}"),
        Planted("secret-assignment", phrase, orjson.dumps({"passphrase": phrase}).decode()),
    ]


def _sha1(rng: random.Random) -> str:
    return hashlib.sha1(rng.randbytes(16)).hexdigest()


def _sri(rng: random.Random) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(rng.randbytes(16)).digest()).decode()


def code_corpus(seed: int = 16, copies: int = 20) -> list[str]:
    """Texts full of secret look-alikes that are not secrets: git SHAs, UUIDs, lockfile hashes,
    image digests, base64 blobs, code that *names* passwords and tokens, env listings without
    secrets, placeholders. The default rules must redact nothing here."""
    rng = random.Random(seed)
    texts: list[str] = []
    for _ in range(copies):
        shas = [_sha1(rng) for _ in range(6)]
        ids = [str(uuid.UUID(bytes=rng.randbytes(16), version=4)) for _ in range(4)]
        texts += [
            "\n".join(f"{s[:7]} Fix flaky test in module {i}" for i, s in enumerate(shas)),
            f"commit {shas[0]}\nMerge: {shas[1][:7]} {shas[2][:7]}\nAuthor: Dev <dev@example.org>",
            f"git rebase --onto {shas[3]} {shas[4]}; git show {shas[5]}:src/app.py",
            orjson.dumps({"name": "app", "lockfileVersion": 3, "packages": {
                f"node_modules/pkg{i}": {"version": f"1.{i}.0", "resolved":
                                         f"https://registry.npmjs.org/pkg{i}/-/pkg{i}-1.{i}.0.tgz",
                                         "integrity": _sri(rng)} for i in range(5)}},
                         option=orjson.OPT_INDENT_2).decode(),
            "\n".join(f'pkg{i}@^1.{i}.0:\n  version "1.{i}.3"\n  resolved "https://registry.'
                      f'yarnpkg.com/pkg{i}/-/pkg{i}-1.{i}.3.tgz#{_sha1(rng)}"\n  integrity '
                      f"{_sri(rng)}" for i in range(4)),
            "\n".join(f'[[package]]\nname = "crate{i}"\nversion = "0.{i}.1"\nsource = '
                      f'"registry+https://github.com/rust-lang/crates.io-index"\nchecksum = '
                      f'"{hashlib.sha256(rng.randbytes(8)).hexdigest()}"' for i in range(4)),
            "\n".join(f'    {{file = "lib{i}-1.0-py3-none-any.whl", hash = "sha256:'
                      f'{hashlib.sha256(rng.randbytes(8)).hexdigest()}"}},' for i in range(4)),
            "\n".join(f"github.com/mod/m{i} v1.{i}.0 h1:"
                      f"{base64.b64encode(hashlib.sha256(rng.randbytes(8)).digest()).decode()}"
                      for i in range(4)),
            "requests==2.32.3 \\\n    --hash=sha256:"
            + hashlib.sha256(rng.randbytes(8)).hexdigest(),
            f"FROM python:3.12-slim@sha256:{hashlib.sha256(rng.randbytes(8)).hexdigest()}",
            "\n".join(f"{i}\t{u}\trunning" for i, u in enumerate(ids)),
            f'{{"sessionId": "{ids[0]}", "parentUuid": "{ids[1]}", "requestId": "req_'
            f'{_r(rng, 24)}", "toolUseId": "toolu_{_r(rng, 24)}"}}',
            "data:image/png;base64," + base64.b64encode(rng.randbytes(600)).decode(),
            "def login(username: str, password: str) -> Token:\n"
            "    token = create_token(user=username, secret=settings.SECRET_KEY)\n"
            "    api_key = os.environ['API_KEY']\n"
            "    password_hash = hash_password(password)\n"
            "    return Token(access_token=token, token_type='bearer')",
            "class Settings(BaseSettings):\n    api_key: SecretStr\n    password: str = ''\n"
            "    private_key_path: Path = Path('~/.ssh/id_ed25519')\n    max_tokens: int = 4096",
            'const token = req.headers.authorization?.split(" ")[1];\n'
            "if (!token) throw new Error('missing bearer token');\n"
            "const secret = process.env.JWT_SECRET;",
            "PATH=/usr/local/bin:/usr/bin\nHOME=/home/dev\nSHELL=/bin/bash\nLANG=C.UTF-8\n"
            "MAX_TOKENS=4096\nTOKENIZERS_PARALLELISM=false\nGITHUB_TOKEN_PATH=~/.config/gh\n"
            "API_KEY=${API_KEY}\nDB_PASSWORD=<your-password>\nSECRET_KEY=changeme",
            "# .env.example\nOPENAI_API_KEY=your-openai-key-here\nDATABASE_URL="
            "postgres://user:password@localhost:5432/app\nSTRIPE_SECRET_KEY=sk_live_xxxxxxxx",
            'curl -H "Authorization: Bearer $TOKEN" -H "Accept: application/json" '
            "https://api.github.com/user",
            "The bearer token is sent in the Authorization header; tokens expire after an hour "
            "and the refresh token rotates. Passwords are hashed with argon2.",
            f"pytest -k test_password_reset --seed {rng.randrange(10**9)} -x\n"
            f"FAILED tests/test_auth.py::test_token_expiry - AssertionError: {_sha1(rng)}",
            f"sha256sum dist/app.tar.gz\n{hashlib.sha256(rng.randbytes(8)).hexdigest()}  "
            "dist/app.tar.gz",
            f"color: #{rng.randrange(16**6):06x}; background: #{rng.randrange(16**6):06x};",
            # a port is not a password; a path's `@` ends no authority; a UUID session id names
            # a conversation, not a login
            f"open http://localhost:{rng.randrange(1024, 65535)}/users/{ids[2][:8]}@example.org"
            " and https://registry.npmjs.org/@types/node",
            f"session_id = '{ids[3]}'; sessionId={ids[0]}",
            # an example's values: a secret word with a filler before it
            'PG_USER="myuser"\nPG_PASSWORD="mypassword"\nAPI_TOKEN=test_token1',
        ]
    return texts


# --- sessions carrying the planted secrets -------------------------------------------------------

def _event(seq: int, kind: str, data: Any, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 1_700_000_000_000 + seq * 1000, "data": data,
            **extra}


def _user(seq: int, text: str, **extra: Any) -> dict[str, Any]:
    return _event(seq, "user/message", {"id": f"m{seq}", "role": "user",
                                        "source": {"kind": "user"},
                                        "content": [{"type": "text", "text": text}]},
                  surfaceOp="append", **extra)


def _assistant(seq: int, text: str, call: dict[str, Any] | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if call is not None:
        content.append({"type": "tool-call", "toolCallId": f"call{seq}", "name": "bash",
                        "arguments": call})
    return _event(seq, "assistant/message", {"turn": 0, "step": 0, "message": {
        "id": f"a{seq}", "role": "assistant", "content": content}}, surfaceOp="append")


def _result(seq: int, output: str) -> dict[str, Any]:
    return _event(seq, "tool/result", {"turn": 0, "step": 0, "message": {
        "id": f"t{seq}", "role": "tool", "content": [
            {"type": "tool-result", "toolCallId": f"call{seq - 1}", "content": output,
             "isError": False}]}}, surfaceOp="append")


def secret_sessions(seed: int = 18) -> dict[str, list[dict[str, Any]]]:
    """Session id → [header, events…]: every planted secret in a user prompt, a tool result,
    tool-call arguments (a tool/call event and an assistant tool-call block) and a compaction
    summary (the compaction/summary event and the checkpoint that replaces the surface)."""
    planted = planted_secrets(seed)
    cwd = "/work/secrets-demo"
    sessions: dict[str, list[dict[str, Any]]] = {}

    def header(sid: str, n: int) -> dict[str, Any]:
        return {"type": "session", "version": 0, "id": sid, "cwd": cwd,
                "createdAt": 1_700_000_000_000 + n}

    prompts = [header("leak-prompts", 1)]
    prompts += [_user(i, f"deploy notes {i}: {p.text}") for i, p in enumerate(planted)]
    sessions["leak-prompts"] = prompts

    results = [header("leak-results", 2)]
    for i, p in enumerate(planted):
        results.append(_assistant(2 * i, f"running step {i}", {"command": f"cat step{i}.log"}))
        results.append(_result(2 * i + 1, f"step {i} output:\n{p.text}\nexit 0"))
    sessions["leak-results"] = results

    calls = [header("leak-calls", 3)]
    seq = 0
    for i, p in enumerate(planted):
        calls.append(_assistant(seq, f"calling tool {i}", {"command": p.text}))
        calls.append(_event(seq + 1, "tool/call", {"turn": 0, "step": 0, "callId": f"k{i}",
                                                   "name": "bash",
                                                   "arguments": {"command": p.text,
                                                                 "env": {"NOTE": p.text}}}))
        calls.append(_result(seq + 2, f"tool {i} done"))
        seq += 3
    sessions["leak-calls"] = calls

    compacted = [header("leak-compacted", 4)]
    compacted += [_user(0, "first prompt: build the release"), _assistant(1, "building")]
    summary = "Summary of the work so far:\n" + "\n".join(p.text for p in planted)
    compacted.append(_event(2, "compaction/start", {"compactionId": "c1", "turn": None}))
    compacted.append(_event(3, "compaction/summary", {
        "compactionId": "c1", "summary": summary, "shadowedRange": {"start": 0, "end": 1},
        "shadowedSeqs": [0, 1], "shadowedTokenCount": 900, "provider": "p", "model": "m"}))
    compacted.append(_event(4, "user/message", {
        "id": "m4", "role": "user", "source": {"kind": "plugin", "plugin": "compact",
                                               "compactionId": "c1"},
        "content": [{"type": "text", "text": summary}]},
        surfaceOp={"op": "replace", "start": 0, "end": 1}, sourceEventSeqs=[2, 3, 0, 1]))
    compacted.append(_event(5, "compaction/end", {"compactionId": "c1", "turn": None}))
    compacted.append(_user(6, "continue after the compaction"))
    compacted.append(_assistant(7, "continuing the release"))
    sessions["leak-compacted"] = compacted

    sessions["clean-target"] = [header("clean-target", 5), _user(0, "what did we deploy?"),
                                _assistant(1, "let me look at the other sessions")]
    return sessions


def write_sessions(directory: Any, sessions: dict[str, list[dict[str, Any]]]) -> list[Any]:
    """One JSONL file per session; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for sid, lines in sessions.items():
        path = directory / f"{sid}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        paths.append(path)
    return paths


def secret_fragments(value: str) -> list[str]:
    """The value and its long alphanumeric runs: none may be findable once redacted (a token
    index splits `ghp_…` at `_`, so the body alone is a token of its own)."""
    runs = [r for r in "".join(c if c.isalnum() else " " for c in value).split() if len(r) >= 12]
    return [value, *runs]
