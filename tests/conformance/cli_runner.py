#!/usr/bin/env python3
"""The conformance runner for the CLI: translates the runner arguments
(README.md, "Runner arguments") into a `panto run --json` command line and runs it, so
the trace is what the CLI prints. Tools become shell-command tools (`--tool`), answered
by `printf`, after `sleep` for a delayed answer, with a non-zero exit for an error result.

    cli_runner.py PANTO_BINARY RUNNER-ARGUMENTS...

Exits 77 (skipped) for what a CLI user cannot ask for: cancelling at an event, a
configuration key without a flag, a tool that answers with images (a shell-command tool
prints text), or an input that is not one text part followed by attachments; a
checkpoint taken at a given event, steering, an external tool, or approval asked for some
tools but not others. An input's attachments are written to files (under their "name",
so a PDF's file name reaches the wire as it would from any runner) and passed with `-a`,
after the prompt's text.

Tools that need approval are run with `--confirm` (with no terminal to ask on, their calls
pause the turn) and `--checkpoint FILE`; `--resume end ANSWERS` then runs `panto resume
FILE --json` with the same flags and `--approve CALL_ID` / `--reject CALL_ID=REASON` /
`--result CALL_ID=TEXT`, after printing `{"runner":"resume"}`.
"""

import base64

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
# Keys that only shape timing (backoff), which the comparison normalizes anyway.
TIMING_ONLY = {"initial_delay_ms", "max_delay_ms", "max_elapsed_ms"}


def main() -> int:
    panto, argv = sys.argv[1], sys.argv[2:]
    config, prompt, answers = None, None, {}
    resume_answers = None  # --resume end ANSWERS
    attachments = []  # (file name, bytes) of --input's attachments
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag == "--config":
            config, i = json.loads(argv[i + 1]), i + 2
        elif flag == "--prompt":
            prompt, i = argv[i + 1], i + 2
        elif flag == "--input":
            parts = json.loads(argv[i + 1])
            i += 2
            text = parts[0] if parts and isinstance(parts[0], str) else None
            if text is None or any(isinstance(p, str) or p.get("type") == "text" or "data" not in p for p in parts[1:]):
                print("the CLI takes one text then attachments by their bytes", file=sys.stderr)
                return SKIP
            prompt = text
            for n, p in enumerate(parts[1:], 1):
                ext = {"image/png": ".png", "image/jpeg": ".jpg", "application/pdf": ".pdf"}.get(p.get("media_type", ""), "")
                attachments.append((p.get("name") or f"part{n}{ext}", base64.b64decode(p["data"])))
        elif flag == "--answer-parts":
            print("a CLI tool (a shell command) answers with text only", file=sys.stderr)
            return SKIP
        elif flag == "--cancel-after":
            print("the CLI cannot cancel at a given event", file=sys.stderr)
            return SKIP
        elif flag == "--resume":
            if argv[i + 1] != "end":
                print("the CLI cannot take a checkpoint at a given event (only the one a run leaves)", file=sys.stderr)
                return SKIP
            resume_answers, i = json.loads(argv[i + 2]), i + 3
        elif flag == "--steer-during":
            print("the CLI cannot steer a running turn (panto run reads no input while it runs)", file=sys.stderr)
            return SKIP
        elif flag == "--after-resume":
            print("the CLI cannot hold a tool's answer until a resume", file=sys.stderr)
            return SKIP
        elif flag == "--answer":
            name, delay, is_error, output = argv[i + 1 : i + 5]
            answers[name] = (int(delay), is_error == "true", output)
            i += 5
        else:
            sys.exit(f"cli_runner: bad argument {flag}")
    assert config is not None and prompt is not None

    cmd = []  # the agent's flags, shared by `run` and `resume`
    flags = {
        "provider": "--provider",
        "model": "--model",
        "base_url": "--base-url",
        "api_key": "--api-key",
        "system": "--system",
        "max_tokens": "--max-tokens",
        "max_steps": "--max-steps",
        "tool_timeout_ms": "--tool-timeout-ms",
        "compat": "--compat",
    }
    tools_file = None
    temp_files = []
    fallback_env = {}  # the other providers' *_BASE_URL and key variables
    for key, value in config.items():
        if key in flags:
            cmd += [flags[key], str(value)]
        elif key == "retry":
            rest = set(value) - {"max_retries"} - TIMING_ONLY
            if rest:
                print(f"no CLI flag for retry.{sorted(rest)}", file=sys.stderr)
                return SKIP
            if "max_retries" in value:
                cmd += ["--retries", str(value["max_retries"])]
        elif key == "timeouts":
            rest = set(value) - {"idle_ms"}
            if rest:
                print(f"no CLI flag for timeouts.{sorted(rest)}", file=sys.stderr)
                return SKIP
            cmd += ["--idle-timeout-ms", str(value["idle_ms"])]
        elif key == "fallback":
            # --fallback PROVIDER:MODEL: the run's endpoint and key for its own provider,
            # else that provider's *_BASE_URL and key variable.
            for entry in value:
                kind = entry["provider"]
                if set(entry) - {"provider", "model", "base_url", "api_key"}:
                    print(f"no CLI flag for fallback[].{sorted(set(entry) - {'provider', 'model', 'base_url', 'api_key'})}", file=sys.stderr)
                    return SKIP
                if kind == config.get("provider", "openai"):
                    if (entry.get("base_url"), entry.get("api_key")) != (config.get("base_url"), config.get("api_key")):
                        print("the CLI's --fallback of the run's own provider takes the run's endpoint and key", file=sys.stderr)
                        return SKIP
                else:
                    prefix = {"anthropic": "ANTHROPIC", "gemini": "GEMINI"}.get(kind, "OPENAI")
                    if f"{prefix}_BASE_URL" in fallback_env:
                        print("one --fallback per other provider's environment", file=sys.stderr)
                        return SKIP
                    fallback_env[f"{prefix}_BASE_URL"] = entry["base_url"]
                    fallback_env[f"{prefix}_API_KEY"] = entry["api_key"]
                cmd += ["--fallback", f"{kind}:{entry['model']}"]
        elif key == "store":
            if value:
                cmd.append("--store")
        elif key == "reasoning":
            if "effort" in value:
                cmd += ["--reasoning", value["effort"]]
            if "budget_tokens" in value:
                cmd += ["--reasoning-budget", str(value["budget_tokens"])]
        elif key == "compaction":
            rest = set(value) - {"threshold_tokens", "keep_last"}
            if rest:
                print(f"no CLI flag for compaction.{sorted(rest)}", file=sys.stderr)
                return SKIP
            cmd += ["--compact-at", str(value["threshold_tokens"])]
            if "keep_last" in value:
                cmd += ["--compact-keep", str(value["keep_last"])]
        elif key == "mcp_servers":
            for name, server in value.items():
                if set(server) == {"url"}:
                    cmd += ["--mcp", f"{name}={server['url']}"]
                elif set(server) <= {"command", "args"}:
                    cmd += ["--mcp", f"{name}={shlex.join([server['command'], *server.get('args', [])])}"]
                else:
                    print(f"no CLI flag for mcp_servers.{name}.{sorted(set(server) - {'url', 'command', 'args'})}", file=sys.stderr)
                    return SKIP
        elif key == "output_schema":
            # The CLI's --schema is the turn's schema: for one turn, the same as the
            # agent's.
            fd, schema_file = tempfile.mkstemp(suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(value, f)
            temp_files.append(schema_file)
            cmd += ["--schema", schema_file]
        elif key == "tools":
            if any(t.get("external") for t in value):
                print("the CLI has no external tools (a --tools entry takes no \"external\")", file=sys.stderr)
                return SKIP
            approval = {bool(t.get("needs_approval")) for t in value}
            if approval == {True, False}:
                print("the CLI's --confirm asks for every tool, not some", file=sys.stderr)
                return SKIP
            if approval == {True}:
                cmd.append("--confirm")
            fd, tools_file = tempfile.mkstemp(suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump([{k: v for k, v in t.items() if k != "needs_approval"} for t in value], f)
            cmd += ["--tools", tools_file]
            for tool in value:
                delay, is_error, output = answers.get(tool["name"], (-1, False, ""))
                if delay < 0:
                    script = "sleep 600"  # killed when the call times out
                else:
                    script = "cat >/dev/null; "
                    if delay:
                        script += f"sleep {delay / 1000}; "
                    script += f"printf %s {shlex.quote(output)}"
                    if is_error:
                        script += "; exit 1"
                cmd += ["--tool", f"{tool['name']}={script}"]
        else:
            print(f"no CLI flag for {key}", file=sys.stderr)
            return SKIP
    files_dir = tempfile.mkdtemp() if attachments else None
    run = [panto, "run", "--json", *cmd]
    for name, data in attachments:
        path = os.path.join(files_dir, name)
        with open(path, "wb") as f:
            f.write(data)
        run += ["-a", path]
    checkpoint_dir = tempfile.mkdtemp() if resume_answers is not None else None
    if checkpoint_dir:
        checkpoint = os.path.join(checkpoint_dir, "turn.json")
        run += ["--checkpoint", checkpoint]
    run.append(prompt)
    try:
        # The exit code tells the error class; the trace's error line says more.
        env = {**os.environ, **fallback_env}
        subprocess.run(run, stdout=sys.stdout, stderr=sys.stderr, env=env)
        if checkpoint_dir and os.path.exists(checkpoint):
            print(json.dumps({"runner": "resume"}), flush=True)
            resume = [panto, "resume", checkpoint, "--json", *cmd]
            for call_id, a in resume_answers.items():
                if a.get("approve") is True:
                    resume += ["--approve", call_id]
                elif "reject" in a:
                    resume += ["--reject", f"{call_id}={a['reject']}"]
                else:
                    resume += ["--result", f"{call_id}={a['output']}"]
            subprocess.run(resume, stdout=sys.stdout, stderr=sys.stderr, env=env)
    finally:
        if tools_file:
            os.unlink(tools_file)
        if files_dir:
            shutil.rmtree(files_dir)
        if checkpoint_dir:
            shutil.rmtree(checkpoint_dir)
        for path in temp_files:
            os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
