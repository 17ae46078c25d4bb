"""A hand-written MCP stdio server for what the `mcp` package cannot send: its JSON
writer never emits a lone UTF-16 surrogate or invalid UTF-8, and its stdio transport
never closes its input while it keeps running. Standard library only.

It answers `initialize` (protocol 2025-11-25), lists one tool, `say`, and answers its
calls with the text "said: <text>". Flags pick the misbehaviour:

  --surrogate-call   the call's answer holds a lone surrogate escape ("\\ud800")
  --invalid-utf8-call  the call's answer holds a byte that is not UTF-8 (0xff)
  --surrogate-list   the tool's description holds a lone surrogate escape
  --close-stdin      on tools/list, close stdin, answer, and keep running (stdout
                     open) until killed
"""

import json
import os
import sys
import time

args = set(sys.argv[1:])
out = sys.stdout.buffer


def send(raw: bytes):
    out.write(raw + b"\n")
    out.flush()


def answer(id_, result_json: str):
    send(('{"jsonrpc":"2.0","id":%s,"result":%s}' % (json.dumps(id_), result_json)).encode())


def main():
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        msg = json.loads(line)
        method = msg.get("method")
        id_ = msg.get("id")
        if id_ is None:
            continue
        if method == "initialize":
            answer(id_, json.dumps({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"},
            }))
        elif method == "tools/list":
            desc = "Says it \\ud800 back." if "--surrogate-list" in args else "Says it back."
            closing = "--close-stdin" in args
            if closing:
                # Closed before the answer, so that it is closed before panto can send a
                # call (closed after, a busy machine could let the call into the pipe first).
                sys.stdin.close()
                os.close(0)
            answer(id_, '{"tools":[{"name":"say","description":"%s",'
                        '"inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}]}' % desc)
            if closing:
                while True:
                    time.sleep(3600)
        elif method == "tools/call":
            said = "said: " + str(msg["params"]["arguments"].get("text", ""))
            text = json.dumps(said)[1:-1]
            if "--surrogate-call" in args:
                send(('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s \\ud800!"}]}}'
                      % (json.dumps(id_), text)).encode())
            elif "--invalid-utf8-call" in args:
                send(('{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s '
                      % (json.dumps(id_), text)).encode() + b"\xff!\"}]}}")
            else:
                answer(id_, json.dumps({"content": [{"type": "text", "text": said}]}))
        else:
            send(('{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}' % json.dumps(id_)).encode())


if __name__ == "__main__":
    main()
