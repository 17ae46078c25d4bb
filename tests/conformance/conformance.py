#!/usr/bin/env python3
"""Runs every conformance scenario through every runner and compares each trace with the
scenario's golden trace, as JSON values, line by line. See README.md beside this file.

    conformance.py --runner NAME=COMMAND... [--scenario NAME]... [--update RUNNER]
                   [--server PATH]

COMMAND is split like a shell word list (shlex); the runner's arguments are appended.
Exit status: 0 when every trace matches, 1 on any difference (each one printed with the
runner, the scenario and the line), 2 for bad usage or a missing tool.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import json
import os
import shlex
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "scenarios"
# A generous hang-catcher, not a speed limit: no scenario takes more than a few seconds.
RUN_TIMEOUT_S = 120


def load_scenario(name: str) -> Tuple[dict, dict]:
    d = SCENARIOS / name
    server = json.loads((d / "server.json").read_text(encoding="utf-8"))
    client = json.loads((d / "client.json").read_text(encoding="utf-8"))
    # POSTed scenarios resolve relative body_file paths against the server's working
    # directory; make them absolute, relative to the scenario's own directory as with
    # `panto-testserver --scenario FILE`.
    for exchange in server.get("exchanges", []):
        resp = exchange.get("response", {})
        if "body_file" in resp and not os.path.isabs(resp["body_file"]):
            resp["body_file"] = str((d / resp["body_file"]).resolve())
    return server, client


class McpFixture:
    """The MCP fixture server (tests/mcp/fixture_server.py) over Streamable HTTP, started
    once, the first time a scenario names "{mcp_url}", from the venv tests/mcp/venv.sh
    makes (pinned `mcp` from PyPI)."""

    _lock = threading.Lock()
    _proc: Optional[subprocess.Popen] = None
    _url = ""

    @classmethod
    def url(cls) -> str:
        with cls._lock:
            if cls._proc is None:
                repo = HERE.parent.parent
                venv = subprocess.run(
                    ["bash", str(repo / "tests" / "mcp" / "venv.sh")],
                    check=True, capture_output=True, text=True,
                ).stdout.strip()
                cls._proc = subprocess.Popen(
                    [os.path.join(venv, "bin", "python"), str(repo / "tests" / "mcp" / "fixture_server.py"), "--http"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                )
                assert cls._proc.stdout is not None
                line = cls._proc.stdout.readline()
                if not line.startswith("PORT "):
                    raise RuntimeError(f"the MCP fixture server did not start: {line!r}")
                cls._url = f"http://127.0.0.1:{line.split()[1]}/mcp"
            return cls._url

    @classmethod
    def close(cls) -> None:
        with cls._lock:
            if cls._proc is not None:
                cls._proc.kill()
                cls._proc.wait()
                cls._proc = None


def with_mcp_url(value: Any) -> Any:
    """`value` with every "{mcp_url}" replaced by the fixture server's URL."""
    if isinstance(value, str):
        return value.replace("{mcp_url}", McpFixture.url()) if "{mcp_url}" in value else value
    if isinstance(value, dict):
        return {k: with_mcp_url(v) for k, v in value.items()}
    if isinstance(value, list):
        return [with_mcp_url(v) for v in value]
    return value


def runner_args(client: dict, url: str) -> List[str]:
    """The command line every runner takes (README.md, "Runner arguments")."""
    config = with_mcp_url(dict(client["config"]))
    provider = config.get("provider", "openai")
    # As each provider's SDK spells it: OpenAI's (both APIs) with the version.
    config["base_url"] = url + "/v1" if provider in ("openai", "openai-responses") else url
    config.setdefault("api_key", "conformance-key")
    # Fallback models answer on the same server, on their provider's path.
    for entry in config.get("fallback", []):
        kind = entry.get("provider", "openai")
        entry.setdefault("base_url", url + "/v1" if kind in ("openai", "openai-responses") else url)
        entry.setdefault("api_key", "conformance-fallback-key")
    tools = client.get("tools", [])
    if tools:
        config["tools"] = [
            {k: t[k] for k in ("name", "description", "parameters", "needs_approval", "external") if k in t}
            for t in tools
        ]
    args = ["--config", json.dumps(config, ensure_ascii=False)]
    if "input" in client:  # text and attachments, in the input form
        args += ["--input", json.dumps(client["input"], ensure_ascii=False)]
    else:
        args += ["--prompt", client["prompt"]]
    if "cancel_after" in client:
        args += ["--cancel-after", str(client["cancel_after"])]
    if "resume" in client:  # checkpoint, then resume in a new agent with these answers
        resume = client["resume"]
        args += [
            "--resume",
            str(resume.get("after", "end")),
            json.dumps(resume.get("answers", {}), ensure_ascii=False),
        ]
    if "steer" in client:  # steer while the named host tool runs
        args += ["--steer-during", client["steer"]["during"], client["steer"]["text"]]
    for t in tools:
        if t.get("after_resume"):  # not answered before the resume
            args += ["--after-resume", t["name"]]
    for t in tools:
        answer = t.get("answer")
        if t.get("external"):  # never run by panto: its result comes with the resume
            continue
        if answer is None:
            args += ["--answer", t["name"], "-1", "false", ""]
        elif "parts" in answer:  # text and images, in the input form
            args += [
                "--answer-parts",
                t["name"],
                str(answer.get("delay_ms", 0)),
                "true" if answer.get("is_error") else "false",
                json.dumps(answer["parts"], ensure_ascii=False),
            ]
        else:
            args += [
                "--answer",
                t["name"],
                str(answer.get("delay_ms", 0)),
                "true" if answer.get("is_error") else "false",
                answer["output"],
            ]
    return args


def normalize(events: List[Any]) -> List[Any]:
    """Removes what legitimately varies between runs (README.md, "Normalization")."""
    out = []
    for ev in events:
        if isinstance(ev, dict) and ev.get("type") == "provider_retry" and "delay_ms" in ev:
            ev = dict(ev, delay_ms="<normalized>")
        out.append(ev)
    # Concurrent tools finish in any order: within a run of tool_call_start/tool_result
    # events, results are put in the order of their calls' starts.
    i = 0
    while i < len(out):
        j = i
        while j < len(out) and isinstance(out[j], dict) and out[j].get("type") in (
            "tool_call_start",
            "tool_result",
        ):
            j += 1
        if j > i:
            run = out[i:j]
            starts = [e for e in run if e["type"] == "tool_call_start"]
            order = {e.get("call_id"): n for n, e in enumerate(starts)}
            results = sorted(
                (e for e in run if e["type"] == "tool_result"),
                key=lambda e: order.get(e.get("call_id"), len(order)),
            )
            out[i:j] = starts + results
            i = j
        else:
            i += 1
    return out


def parse_trace(text: str) -> Tuple[List[Any], List[str]]:
    events, problems = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as e:
            events.append(line)
            problems.append(f"line {n} is not JSON ({e}): {line[:200]}")
    return events, problems


def describe_difference(golden: Any, actual: Any) -> str:
    if isinstance(golden, dict) and isinstance(actual, dict):
        parts = []
        for key in sorted(set(golden) | set(actual)):
            if key not in actual:
                parts.append(f"missing field {key!r} (golden: {json.dumps(golden[key])})")
            elif key not in golden:
                parts.append(f"extra field {key!r}: {json.dumps(actual[key])}")
            elif golden[key] != actual[key]:
                parts.append(
                    f"field {key!r}: golden {json.dumps(golden[key], ensure_ascii=False)}, "
                    f"got {json.dumps(actual[key], ensure_ascii=False)}"
                )
        return "; ".join(parts)
    return "different values"


def compare(runner: str, scenario: str, golden: List[Any], actual: List[Any]) -> List[str]:
    golden, actual = normalize(golden), normalize(actual)
    failures = []
    for n, (g, a) in enumerate(zip(golden, actual), 1):
        if g != a:
            failures.append(
                f"FAIL {runner} / {scenario} / line {n}: {describe_difference(g, a)}\n"
                f"    golden: {json.dumps(g, ensure_ascii=False)}\n"
                f"    actual: {json.dumps(a, ensure_ascii=False)}"
            )
            break  # later lines usually differ for the same reason
    if not failures and len(golden) != len(actual):
        n = min(len(golden), len(actual)) + 1
        which = "golden" if len(golden) > len(actual) else "actual"
        extra = (golden if which == "golden" else actual)[n - 1]
        failures.append(
            f"FAIL {runner} / {scenario} / line {n}: the trace has {len(actual)} lines, "
            f"the golden trace {len(golden)}; first line only in the {which} trace:\n"
            f"    {json.dumps(extra, ensure_ascii=False)}"
        )
    if failures:
        diff = difflib.unified_diff(
            [json.dumps(e, sort_keys=True, ensure_ascii=False) for e in golden],
            [json.dumps(e, sort_keys=True, ensure_ascii=False) for e in actual],
            f"golden/{scenario}",
            f"{runner}/{scenario}",
            lineterm="",
            n=1,
        )
        failures.append("\n".join("    " + line for line in diff))
    return failures


class Server:
    """One panto-testserver process; scenarios are POSTed to it one after another."""

    def __init__(self, binary: str) -> None:
        self.proc = subprocess.Popen(
            [binary, "--exit-on-stdin-eof"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.close()
            raise RuntimeError(f"panto-testserver did not start: {line!r}")
        self.url = line[len("listening on ") :].strip()

    def load(self, scenario: dict) -> None:
        req = urllib.request.Request(
            self.url + "/_panto/scenario",
            data=json.dumps(scenario).encode(),
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# A runner exits with this status for a scenario it cannot express (the CLI cannot
# cancel at a given event); the scenario is reported as skipped for that runner.
SKIPPED = 77


def run_one(command: List[str], server: Server, scenario: str) -> Tuple[str, str, bool]:
    server_json, client = load_scenario(scenario)
    server.load(server_json)
    proc = subprocess.run(
        command + runner_args(client, server.url),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=RUN_TIMEOUT_S,
    )
    return proc.stdout, proc.stderr, proc.returncode == SKIPPED


def run_runner(
    name: str,
    command: List[str],
    scenarios: List[str],
    server_bin: str,
    lock: threading.Lock,
    skips: List[Tuple[str, str]],
) -> List[str]:
    failures: List[str] = []
    server = Server(server_bin)
    try:
        for scenario in scenarios:
            golden_path = SCENARIOS / scenario / "golden.jsonl"
            try:
                stdout, stderr, skipped = run_one(command, server, scenario)
            except subprocess.TimeoutExpired:
                failures.append(f"FAIL {name} / {scenario}: no end after {RUN_TIMEOUT_S} s")
                continue
            if skipped:
                with lock:
                    print(f"skip {name:13} {scenario}: {stderr.strip()}", flush=True)
                    skips.append((name, scenario))
                continue
            actual, problems = parse_trace(stdout)
            golden, _ = parse_trace(golden_path.read_text(encoding="utf-8"))
            found = [f"FAIL {name} / {scenario} / {p}" for p in problems]
            found += compare(name, scenario, golden, actual)
            if found and stderr.strip():
                found.append("    runner stderr:\n" + "\n".join("      " + l for l in stderr.splitlines()[-10:]))
            with lock:
                status = "ok  " if not found else "FAIL"
                print(f"{status} {name:13} {scenario}", flush=True)
            failures += found
    finally:
        server.close()
    return failures


def update(name: str, command: List[str], scenarios: List[str], server_bin: str) -> None:
    server = Server(server_bin)
    try:
        for scenario in scenarios:
            stdout, stderr, _ = run_one(command, server, scenario)
            events, problems = parse_trace(stdout)
            if problems or not events:
                sys.exit(f"{name} / {scenario}: unusable trace: {problems or 'empty'}\n{stderr}")
            lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in events]
            (SCENARIOS / scenario / "golden.jsonl").write_text(
                "\n".join(lines) + "\n", encoding="utf-8"
            )
            print(f"wrote {scenario}/golden.jsonl ({len(lines)} lines) from {name}")
    finally:
        server.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", action="append", default=[], metavar="NAME=COMMAND")
    ap.add_argument("--scenario", action="append", default=[])
    ap.add_argument("--update", metavar="RUNNER", help="rewrite the golden traces from this runner")
    ap.add_argument("--server", required=True, help="the panto-testserver binary")
    ap.add_argument("--jobs", type=int, default=2)
    opts = ap.parse_args()

    runners: Dict[str, List[str]] = {}
    for spec in opts.runner:
        name, sep, command = spec.partition("=")
        if not sep or not command:
            ap.error(f"--runner wants NAME=COMMAND, got {spec!r}")
        runners[name] = shlex.split(command)
    scenarios = opts.scenario or sorted(p.name for p in SCENARIOS.iterdir() if p.is_dir())
    for s in scenarios:
        if not (SCENARIOS / s / "client.json").is_file():
            ap.error(f"no scenario {s!r} in {SCENARIOS}")

    try:
        return run(opts, ap, runners, scenarios)
    finally:
        McpFixture.close()


def run(opts: argparse.Namespace, ap: argparse.ArgumentParser, runners: Dict[str, List[str]],
        scenarios: List[str]) -> int:
    if opts.update:
        if opts.update not in runners:
            ap.error(f"--update {opts.update}: no such --runner")
        update(opts.update, runners[opts.update], scenarios, opts.server)
        return 0

    missing = [s for s in scenarios if not (SCENARIOS / s / "golden.jsonl").is_file()]
    if missing:
        print(f"scenarios without golden.jsonl (run with --update): {', '.join(missing)}", file=sys.stderr)
        return 1
    lock = threading.Lock()
    failures: List[str] = []
    skips: List[Tuple[str, str]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = {
            pool.submit(run_runner, name, command, scenarios, opts.server, lock, skips): name
            for name, command in runners.items()
        }
        for fut in concurrent.futures.as_completed(futures):
            failures += fut.result()
    total = len(scenarios) * len(runners) - len(skips)
    if failures:
        print("\n" + "\n".join(failures), file=sys.stderr)
        bad = sum(1 for f in failures if f.startswith("FAIL "))
        print(f"\nconformance: {bad} of {total} traces differ from the golden ones", file=sys.stderr)
        return 1
    print(
        f"conformance: {total} traces match ({len(scenarios)} scenarios x {len(runners)} runners, "
        f"{len(skips)} skipped)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
