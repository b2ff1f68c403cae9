"""Every example and every documentation block runs here, so none can silently rot.

Each ``examples/*.py`` runs as a script and must exit 0, unless `DRIVEN_ELSEWHERE` names the test modules that drive
it. Every ``sh`` and ``python`` block of ``README.md`` and ``docs/**/*.md`` runs, page by page, in one shell, in order;
a block that cannot run here says why in a ``<!-- not run: REASON -->`` comment right before its fence, and a marker
before anything else fails the suite, so a typo cannot turn a block off (docs/contributing-docs.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
from contextlib import suppress
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from examples import fleet_client, fleet_server

from statecodec import format_keys, generate_key
from tests.integration.fleet_harness import fleet
from tests.plugins import free_port, free_ports
from tests.plugins.aws import CREDENTIALS, REGION

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 120
NOT_RUN = re.compile(r"^<!-- not run: (?P<reason>.*?) ?-->$")
RETIRED_MARKER = "<!-- runnable -->"
DRIVEN_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "fleet_server.py": (
        "tests/integration/fleet_harness.py",
        "tests/integration/test_fleet.py",
        "tests/integration/test_fleet_single_use.py",
        "tests/integration/test_fleet_fastmcp.py",
    ),
    "fleet_client.py": ("tests/integration/test_fleet.py",),
}
LANGUAGES = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)")


@dataclass(frozen=True)
class Block:
    """A fenced sh or python block: where it is, its language, its code, and why it does not run ('' if it does)."""

    id: str
    lang: str
    code: str
    not_run: str = ""


class MarkerError(ValueError):
    """A not-run marker that does not sit right before a block in a supported language, or gives no reason."""


def _closes(line: str, fence: str) -> bool:
    return set(line.strip()) == {fence[0]} and len(line.strip()) >= len(fence)


def doc_blocks(name: str, text: str) -> list[Block]:
    """Every sh and python block of one Markdown document, in order; `MarkerError` on a stray marker."""
    lines, blocks, i = text.splitlines(), [], 0
    pending: tuple[int, str] | None = None  # (line number, reason) of a not-run marker still waiting for its block
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            line = lines[i].strip()
            if line == RETIRED_MARKER:
                raise MarkerError(f"{name}:{i + 1}: every block runs without a marker now: remove it")
            if pending is not None and line:
                raise MarkerError(f"{name}:{pending[0]}: not-run marker not followed by a code block")
            if marker := NOT_RUN.match(line):
                if not marker["reason"].strip():
                    raise MarkerError(f"{name}:{i + 1}: not-run marker without a reason")
                pending = (i + 1, marker["reason"].strip())
            i += 1
            continue
        indent, fence, opening = match["indent"], match["fence"], i + 1
        end = next((j for j in range(opening, len(lines)) if _closes(lines[j], fence)), len(lines))
        lang = LANGUAGES.get(match["lang"].lower())
        if pending is not None and (lang is None or end == len(lines)):
            raise MarkerError(f"{name}:{pending[0]}: not-run marker before a block in {match['lang'] or 'no language'}"
                              + (" never closed" if end == len(lines) else ""))  # fmt: skip
        if lang is not None:
            body = [ln.removeprefix(indent) if ln.startswith(indent) else ln.lstrip() for ln in lines[opening:end]]
            blocks.append(Block(f"{name}:{opening}", lang, "\n".join(body) + "\n", pending[1] if pending else ""))
        pending = None
        i = end + 1
    if pending is not None:
        raise MarkerError(f"{name}:{pending[0]}: not-run marker not followed by a code block")
    return blocks


def run(
    cmd: list[str], cwd: Path, extra_env: dict[str, str] | None = None, path: Path | None = None
) -> tuple[int, str]:
    """Exit status and output (stdout and stderr) of `cmd`, run in its own process group, which is then
    killed with whatever it left running. Output goes to a file: a leftover process would hold a pipe open."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")}
    first = [str(p) for p in (path, Path(sys.executable).parent) if p is not None]
    env |= {"PATH": os.pathsep.join([*first, env.get("PATH", "")]), "PYTHONWARNINGS": "error"}
    env["STATECODEC_KEYS"] = format_keys([generate_key()])
    env |= extra_env or {}
    env = {name: value for name, value in env.items() if value}  # an empty value: the variable is not set
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            returncode = process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            returncode = -signal.SIGKILL
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        out.seek(0)
        return returncode, out.read().decode(errors="replace")


# --- examples ---------------------------------------------------------------------------------


def test_demo_narrates_two_rounds_a_refused_tamper_and_what_next(tmp_path: Path) -> None:
    # Its fresh-key run; docs/quickstart.md runs it with --from-env.
    returncode, text = run([sys.executable, str(EXAMPLES / "demo.py")], tmp_path)
    assert returncode == 0, text
    assert "codec: AESGCMCodec(key_ids=[" in text
    tokens = [line.strip() for line in text.splitlines() if line.startswith("         ") and len(line.strip()) > 100]
    sealed, tampered = tokens
    assert sum(a != b for a, b in zip(sealed, tampered, strict=True)) == 1
    assert "result: Provisioned 'orders' in eu-west-1" in text
    assert "client got error -32602: 'Invalid or expired requestState'" in text
    assert "server log: requestState rejected on tools/call: seal" in text
    assert "cannot read or change it" in text  # what sealing means
    assert "next: " in text


def test_demo_from_env_without_a_codec_says_what_to_set_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")}
    result = subprocess.run([sys.executable, str(EXAMPLES / "demo.py"), "--from-env"], env=env, capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, check=False)  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "demo: cannot start: no codec configured: set STATECODEC_KEYS (keys from `statecodec keygen`) for the default "
        "aesgcm codec, or STATECODEC_CODEC to one of: aesgcm, aws-kms, gcp-kms, jwe, jws, vault-envelope, xaesgcm"
    ]


def test_fleet_client_names_the_missing_bearer_token_instead_of_the_sdks_32603(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = {"STATECODEC_KEYS": format_keys([generate_key()]), "FLEET_DEMO_AUTH": "1"}
    with fleet(tmp_path, [settings]) as (server,):
        assert fleet_client.main([server.url]) == fleet_client.EXIT_REJECTED
        assert fleet_client.main([server.url, "--token", "not-a-demo-token"]) == fleet_client.EXIT_REJECTED
        assert fleet_client.main([server.url, "--token", "demo-alice"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"rejected: {server.url} answered HTTP 401: the server wants a bearer token (pass --token demo-<user>)",
        f"rejected: {server.url} answered HTTP 401: the server wants a bearer token (this token is refused; pass "
        "another with --token)",
    ]


@pytest.mark.parametrize("name", sorted(DRIVEN_ELSEWHERE))
def test_served_example_is_driven_by_its_tests(name: str) -> None:
    assert (EXAMPLES / name).is_file(), f"{name} is listed in DRIVEN_ELSEWHERE but was removed"
    for module in DRIVEN_ELSEWHERE[name]:
        assert Path(name).stem in (ROOT / module).read_text(encoding="utf-8"), f"{module} does not drive {name}"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--host", "0.0.0.0"], {"STATECODEC_KEYS": format_keys([generate_key()])}, "loopback"),
        ([], {}, "cannot start: no codec configured: set STATECODEC_KEYS"),
        ([], {"STATECODEC_KEYS": format_keys([generate_key()]), "STATECODEC_STORE_URL": "redis://127.0.0.1:1/0"},
         "cannot start: no keys configured: set STATECODEC_STORE_KEY"),
        ([], {"STATECODEC_KEYS": format_keys([generate_key()]), "FLEET_DEMO_AUTH": "yes"},
         "FLEET_DEMO_AUTH must be 1 or 0, not 'yes'"),
    ],
    ids=["network-address", "no-ring", "half-a-single-use-setup", "bad-auth-flag"],
)
def test_fleet_server_stops_before_serving_with_one_line_on_a_bad_setup(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str], message: str
) -> None:
    for name in [k for k in os.environ if k.startswith(("STATECODEC_", "FLEET_"))]:
        monkeypatch.delenv(name)  # `env` is its only STATECODEC_* and FLEET_* settings: main reads them when called
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit, match=message) as info:
        fleet_server.main([*argv, "--port", "1"])
    assert info.value.__suppress_context__ or info.value.__context__ is None  # one line, no traceback


def test_fleet_server_without_the_redis_extra_says_which_extra_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [k for k in os.environ if k.startswith(("STATECODEC_", "FLEET_"))]:
        monkeypatch.delenv(name)
    key, store_key = format_keys([generate_key()]), format_keys([generate_key()])
    for name, value in {"STATECODEC_KEYS": key, "STATECODEC_STORE_URL": "redis://127.0.0.1:1/0",
                        "STATECODEC_STORE_KEY": store_key}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(sys.modules, "redis", None)  # what `import redis` does without the extra: ImportError
    monkeypatch.delitem(sys.modules, "statecodec.redis_store", raising=False)
    message = "cannot start: the Redis store needs the 'redis' package; install it with: "
    message += "pip install 'statecodec[redis]'"
    with pytest.raises(SystemExit, match=f"^{re.escape(message)}$") as info:
        fleet_server.main(["--port", "1"])
    assert info.value.__suppress_context__  # one line, no traceback
    with pytest.raises(SystemExit) as factory:  # uvicorn's factory, in each worker: one line, then its status 3
        fleet_server.create_app()
    assert factory.value.code == 3
    assert capsys.readouterr().err == f"fleet_server: {message}\n"


def test_fleet_server_factory_on_a_bad_configuration_stops_uvicorn_instead_of_restarting_workers(
    tmp_path: Path,
) -> None:
    # Every worker fails the same way; uvicorn stops on a worker's start-up failure status (3), not on a traceback.
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATECODEC_")}
    uvicorn = [sys.executable, "-m", "uvicorn", "--factory", "--app-dir", str(EXAMPLES), "fleet_server:create_app"]
    for workers in ("1", "2"):
        result = subprocess.run([*uvicorn, "--host", "127.0.0.1", "--port", str(free_port()), "--workers", workers],
                                cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                timeout=TIMEOUT_S, check=False)  # fmt: skip
        message = "fleet_server: cannot start: no codec configured: set STATECODEC_KEYS"
        assert 1 <= result.stderr.count(message) <= int(workers), result.stderr  # each worker once at most
        assert "Traceback" not in result.stderr
        if workers == "1":
            assert result.returncode == 3  # the factory runs in uvicorn's own process
        else:  # the supervisor stops the fleet (and, as uvicorn does, exits 0 itself)
            assert "failed to start, stopping the parent process" in result.stderr


# --- documentation blocks ---------------------------------------------------------------------


def _all_blocks() -> tuple[list[Block], list[str]]:
    """Every sh and python block, and every stray marker (reported by a test, not as a collection error)."""
    blocks, errors = [], []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        try:
            blocks += doc_blocks(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
        except MarkerError as exc:
            errors.append(str(exc))
    return blocks, errors


BLOCKS, MARKER_ERRORS = _all_blocks()


# Each examples/*.py runs as a script, once: in a block that runs it as written, in its own test here (demo.py),
# or on its own below.
RUN_BY_DOCS = {
    name for block in BLOCKS if not block.not_run for name in re.findall(r"python examples/(\w+\.py)", block.code)
}
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in {*DRIVEN_ELSEWHERE, *RUN_BY_DOCS, "demo.py"})


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_script_runs(name: str, tmp_path: Path) -> None:
    returncode, output = run([sys.executable, str(EXAMPLES / name)], tmp_path)
    assert returncode == 0, output
    assert output.strip(), f"{name} printed nothing"


def test_the_suite_finds_every_example_and_block_and_no_stray_marker() -> None:
    assert {"quickstart.py", "demo.py"} <= RUN_BY_DOCS
    assert len([block for block in BLOCKS if not block.not_run]) > 60
    assert MARKER_ERRORS == []


# docs/deployment.md runs in test_the_two_instance_blocks_run_as_written, which checks what its servers print too.
DEPLOYMENT = "docs/deployment.md"
PAGES = sorted({block.id.partition(":")[0] for block in BLOCKS} - {DEPLOYMENT})

def pip_stand_in(argv: list[str]) -> str:
    """`pip install REQUIREMENT...` as a page runs it: each requirement must resolve in this project (an extra that
    pyproject.toml declares, each of its packages pinned in constraints.txt, or a package pinned there) to the version
    this interpreter already has, so that the blocks after the line run with what it installs; nothing is downloaded.
    What it checked, or `AssertionError` saying what does not resolve."""
    assert argv[:1] == ["install"], f"pip stand-in: only `pip install REQUIREMENT...` runs, not {argv}"
    assert argv[1:], "pip stand-in: `pip install` names no requirement"
    lines = (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
    pins = {_normal(name): pin for name, _, pin in (line.partition("==") for line in lines) if pin}
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for requirement in argv[1:]:
        match = re.fullmatch(r"(?P<name>[\w.-]+)(?:\[(?P<extras>[\w,-]+)\])?", requirement)
        assert match, f"pip stand-in: {requirement!r} is not a requirement this stand-in reads"
        names = [match["name"]]
        for extra in match["extras"].split(",") if match["extras"] else []:
            assert match["name"] == "statecodec", f"pip stand-in: extras of another package, in {requirement}"
            assert extra in extras, f"pip stand-in: no extra {extra} in {requirement}"
            names += [re.split(r"[^\w.-]", dependency)[0] for dependency in extras[extra]]
        for name in names:
            pin = version("statecodec") if name == "statecodec" else pins.get(_normal(name))
            assert pin is not None, f"pip stand-in: {name} is not pinned in constraints.txt"
            assert pin == version(name), f"pip stand-in: {name} {version(name)} installed, constraints.txt pins {pin}"
    return f"pip stand-in: {' '.join(argv[1:])} resolves to the pinned versions installed here; nothing downloaded"


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# The `pip` first on a page's PATH.
PIP_SCRIPT = "#!{python}\nimport sys\nsys.path.insert(0, {root!r})\nfrom tests.test_examples import pip_stand_in\n"
PIP_SCRIPT += "print(pip_stand_in(sys.argv[1:]))\n"


def one_shell_script(blocks: list[Block]) -> str:
    """The page's blocks in order, as a reader pastes them into one shell: variables, exports and files carry
    over from block to block; a Python block is fed to ``python -`` as pasted. A failure names its block; a block
    that does not run is named, with its reason, where it would have run."""
    lines = ["trap 'echo \"failed in block $BLOCK\" >&2' ERR"]
    for block in blocks:
        if block.not_run:
            lines.append(f"# {block.id} not run: {block.not_run}")
            continue
        lines.append(f"BLOCK={block.id}; echo '=== {block.id}'")
        lines.append(block.code if block.lang == "sh" else f"python - <<'PASTED_PYTHON'\n{block.code}PASTED_PYTHON")
    return "\n".join(lines) + "\n"


def run_page(blocks: list[Block], tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    (tmp_path / "examples").symlink_to(EXAMPLES, target_is_directory=True)
    (tmp_path / "bin").mkdir()
    pip = tmp_path / "bin" / "pip"
    pip.write_text(PIP_SCRIPT.format(python=sys.executable, root=str(ROOT)), encoding="utf-8")
    pip.chmod(0o755)
    (tmp_path / "page.sh").write_text(one_shell_script(blocks), encoding="utf-8")
    return run(["bash", "-euo", "pipefail", str(tmp_path / "page.sh")], tmp_path, env, path=tmp_path / "bin")


def page_services(blocks: list[Block], request: pytest.FixtureRequest) -> tuple[list[Block], dict[str, str]]:
    """The page's blocks on the suite's own services, and the environment that names them. Ports 8001 to 8004 that
    the pages use for their servers become free ones, so that a run beside another one (or a server a reader left
    running) cannot answer in place of the page's own; the Redis at 127.0.0.1:6379 becomes the test's
    redis-server; the AWS CLI and KMS client speak to `moto_server`, where KEY_ARN (unless the page makes it) is a
    key of moto's own; `bao` speaks to a fresh OpenBao as its root."""
    text = "".join(block.code for block in blocks if not block.not_run)
    replace: dict[str, str] = {}
    env: dict[str, str] = {}
    ports = sorted(set(re.findall(r"\b800[1-4]\b", text)))
    replace |= dict(zip(ports, map(str, free_ports(len(ports))), strict=True))
    if "redis://127.0.0.1:6379/0" in text:
        replace["redis://127.0.0.1:6379/0"] = request.getfixturevalue("redis_url")
    if "aws kms " in text and shutil.which("aws") is None:  # a tool of the reader's, not of this project's
        pytest.skip("the AWS CLI (aws) is not installed: tests/integration/test_aws_kms.py makes the same KMS calls")
    if "aws kms " in text or "$KEY_ARN" in text:
        moto = request.getfixturevalue("moto_server")
        env |= {"AWS_ENDPOINT_URL": moto.endpoint, "AWS_DEFAULT_REGION": "eu-west-1"}
        env |= {"AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
                "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"]}  # fmt: skip
        if "aws kms " in text:  # a reader provisioning KMS keys, with no ring of their own in the shell
            env["STATECODEC_KEYS"] = ""
        elif "KEY_ARN=" not in text:  # the key the page's reader has: one of moto's own
            env |= {"KEY_ARN": moto.create_key()[0], "AWS_DEFAULT_REGION": REGION}
    if re.search(r"^bao ", text, flags=re.MULTILINE):  # Vault's admin, on a fresh OpenBao with no engine enabled
        bao = request.getfixturevalue("vault_server_fresh")
        bao.api("DELETE", "sys/mounts/transit")
        env |= {"VAULT_ADDR": bao.addr, "VAULT_TOKEN": bao.root_token}
    pattern = re.compile("|".join(sorted((rf"\b{re.escape(k)}\b" if k.isdigit() else re.escape(k)) for k in replace)))
    if replace:
        blocks = [Block(b.id, b.lang, pattern.sub(lambda m: replace[m[0]], b.code), b.not_run) for b in blocks]
    return blocks, env


@pytest.mark.parametrize("page", PAGES)
def test_a_page_runs_in_one_shell_as_a_reader_pastes_it(
    page: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    blocks, env = page_services([b for b in BLOCKS if b.id.startswith(f"{page}:")], request)
    returncode, output = run_page(blocks, tmp_path, env)
    assert returncode == 0, f"{page}: exit {returncode}\n{output}"
    assert "Traceback" not in output, output


def test_blocks_share_one_shell_a_block_not_run_says_why_and_a_failure_names_its_block(tmp_path: Path) -> None:
    page = "```sh\nexport SHARED=1\necho kept > file.txt\n```\n```python\nimport os, pathlib\n"
    page += "assert os.environ['SHARED'] == '1' and pathlib.Path('file.txt').is_file()\n```\n"
    page += "<!-- not run: needs a cloud account -->\n\n```sh\nexit 7\n```\n```json\n{}\n```\n```sh\nfalse\n```\n"
    blocks = doc_blocks("page.md", page)
    assert [(b.lang, b.not_run) for b in blocks] == [("sh", ""), ("python", ""), ("sh", "needs a cloud account"),
                                                     ("sh", "")]  # fmt: skip
    assert "# page.md:11 not run: needs a cloud account\n" in one_shell_script(blocks)
    assert "=== page.md:11" not in one_shell_script(blocks)
    returncode, output = run_page(blocks, tmp_path)
    assert returncode != 0
    assert output.strip().endswith("failed in block page.md:17")


def test_the_two_instance_blocks_run_as_written(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # docs/deployment.md runs here, in one shell as any page does, on free ports in place of 8001 to 8004 and the
    # test's own redis-server in place of the one at 6379; what its shared-ring, SDK-default and single-use blocks
    # print is then checked block by block.
    page = [b for b in BLOCKS if b.id.startswith(f"{DEPLOYMENT}:")]
    ids = [b.id for b in page if "--retry-url" in b.code]
    assert len(ids) == 3, "docs/deployment.md: expected the shared-ring, SDK-default and single-use blocks"
    blocks, env = page_services(page, request)
    returncode, output = run_page(blocks, tmp_path, env)
    assert returncode == 0, f"{DEPLOYMENT}: exit {returncode}\n{output}"
    assert "Traceback" not in output, output
    by_block = dict(re.findall(r"^=== (\S+)\n(.*?)(?=^=== |\Z)", output, flags=re.DOTALL | re.MULTILINE))
    outputs = [by_block[block_id] for block_id in ids]
    shared, sdk_default, single_use = outputs
    for output in (shared, single_use):  # round 1 answered by one process, the retry by the other
        result = json.loads(next(line for line in output.splitlines() if line.startswith("{")))
        servers = {f"pid-{pid}" for pid in re.findall(r"process (\d+) serving", output)}
        assert [result["asked_by"], result["completed_by"]] in ([*servers], [*servers][::-1]), output
        assert (result["region"], len(servers)) == ("eu-west-1", 2)
        assert "requestState rejected" not in output
    assert "rejected: -32602 Invalid or expired requestState" in sdk_default
    assert "exit status 2" in sdk_default
    # The cause, in the refusing server's log only: the other process never had the first one's key.
    assert "requestState rejected on tools/call: unknown key" in sdk_default


@pytest.mark.parametrize(
    "text",
    [
        "<!-- not run: why -->\nSome prose.\n\n```python\nx = 1\n```\n",
        "<!-- not run: why -->\n```\nno language\n```\n",
        "<!-- not run: why -->\n```json\n{}\n```\n",
        "text\n<!-- not run: why -->\n",
        "<!-- not run: why -->\n<!-- not run: why -->\n```python\nx = 1\n```\n",
        "<!-- not run: why -->\n```python\nnever closed\n",
        "<!-- not run:  -->\n```python\nx = 1\n```\n",
        "<!-- runnable -->\n```python\nx = 1\n```\n",
    ],
    ids=["prose-between", "no-language", "unsupported-language", "at-end", "doubled", "unclosed", "no-reason", "old"],
)
def test_a_stray_marker_fails_instead_of_skipping(text: str) -> None:
    with pytest.raises(MarkerError):
        doc_blocks("doc.md", text)


def test_pip_stand_in_accepts_what_resolves_here_and_names_what_does_not() -> None:
    assert "nothing downloaded" in pip_stand_in(["install", "statecodec[mcp,otel]", "opentelemetry-sdk"])
    for argv, message in [(["install", "statecodec[nope]"], "no extra nope"),
                          (["install", "requests-oauthlib"], "requests-oauthlib is not pinned"),
                          (["uninstall", "statecodec"], "only `pip install")]:  # fmt: skip
        with pytest.raises(AssertionError, match=message):
            pip_stand_in(argv)
