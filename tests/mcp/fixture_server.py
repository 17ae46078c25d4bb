"""An MCP server for panto's tests, written with the `mcp` package (tests/mcp/venv.sh).

It speaks stdio by default, Streamable HTTP with --http (on 127.0.0.1, port 0: the
port it got is printed as "PORT <n>" on stdout). Its tools list over three pages and
each shows one behaviour a client must handle:

  page 1: echo {text}           text "echo: <text>"
          env {name}            the variable's value and the working directory
          image                 a text part and a 1x1 PNG image part
  page 2: structured {city}     structuredContent only (no content)
          fail                  isError: true
          slow {steps, interval_ms}   a progress notification per step, then text
          big {size}            size bytes of text
  page 3: hang                  never answers; on notifications/cancelled it writes
                                "fixture: cancelled hang" to stderr (and the file
                                --cancel-marker names, if given; it writes that
                                name + ".started" when the call arrives)
          crash                 writes to stderr, then exits with status 3
          change                sends notifications/tools/list_changed; "added"
                                is listed from then on
          resource              a resource_link and an embedded text resource
          dotted.name           a name with a dot (sanitized by clients)
          pingback              sends the client a ping request, answers once it is
                                answered

With --progress-tools, a fifth page (after --more-tools' fourth, if given):

          report {steps, interval_ms}  per step: progress (step, steps, "step <i>") and
                                a warning log line "warn <i>" (logger "fixture"), then
                                text "reported <steps> steps"
          flood {count}         count progress notifications (i, count, "flood <i>") and
                                count error log lines "line <i>" as fast as it can,
                                then text "flooded"
          levels                one log line at each level (its data the level's
                                name), then one whose data is an object; answers
                                "level set: <the level of logging/setLevel, or None>"

Resources (resources/list over two pages, resources/templates/list, resources/read):

  page 1: fixture://notes       text/plain "the notes"
          fixture://pixel.png   image/png, a 1x1 PNG (a blob)
  page 2: file:///tmp/report.txt  text/plain "the report" (what the resource tool
                                links to)
          fixture://data.bin    application/octet-stream, the bytes 00 01 02
  template: fixture://greeting/{name}   reads as "hello <name>"
  fixture://hang                never answers; on cancellation it writes the file
                                --cancel-marker names (+ ".started" when the read
                                arrives), as the hang tool does
  fixture://env-error/<VAR>     answers an error (-32603) whose message holds the
                                value of the server's environment variable VAR
  anything else                 error -32002 (resource not found)

Prompts (prompts/list, prompts/get):

  greet {name (required), style}  a user message "Say hello to <name>[ in a <style>
                                way]" and an assistant message "Hello, <name>!"
  picture                       a user message of the PNG image, then one of the
                                embedded resource fixture://notes
  anything else, or greet without a name: error -32602 (invalid params)

The server declares the logging capability (a logging/setLevel handler that keeps the
level); as a server of a handshake revision it sends every level all the same.

Flags: --fail-start (write to stderr and exit 2 before reading anything), --linger
(ignore SIGTERM, and stay after stdin ends: only SIGKILL stops it),
--spawn-child (start a `sleep` in the server's process group, for reaping tests),
--more-tools (a fourth page: plain and plain_text, whose
structuredContent mirrors their text as the SDK's MCPServer makes it for a tool
returning a plain value; task_required and task_optional, whose execution.taskSupport
is "required" and "optional"), --require-header NAME=VALUE (HTTP: anything else is a 401), --json-response (HTTP:
JSON bodies instead of SSE streams). In HTTP mode, GET /_log answers the list of
requests to /mcp (method, Accept, Mcp-Session-Id, MCP-Protocol-Version), and POST
/_expire ends every session (the next request with its id gets a 404).
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.shared.exceptions import MCPError

PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def obj(**props):
    return {"type": "object", "properties": props}


PAGES = [
    [
        types.Tool(name="echo", description="Echoes the text.", input_schema=obj(text={"type": "string"})),
        types.Tool(name="env", description="Reads an environment variable and the cwd.",
                   input_schema=obj(name={"type": "string"})),
        types.Tool(name="image", description="Returns an image.", input_schema=obj()),
    ],
    [
        types.Tool(name="structured", description="Returns structured content.",
                   input_schema=obj(city={"type": "string"})),
        types.Tool(name="fail", description="Fails.", input_schema=obj()),
        types.Tool(name="slow", description="Reports progress, then answers.",
                   input_schema=obj(steps={"type": "integer"}, interval_ms={"type": "integer"})),
        types.Tool(name="big", description="Answers size bytes of text.", input_schema=obj(size={"type": "integer"})),
    ],
    [
        types.Tool(name="hang", description="Never answers.", input_schema=obj()),
        types.Tool(name="crash", description="Exits at once.", input_schema=obj()),
        types.Tool(name="change", description="Changes the tool list.", input_schema=obj()),
        types.Tool(name="resource", description="Returns resources.", input_schema=obj()),
        types.Tool(name="dotted.name", description="Has a dot in its name.", input_schema=obj()),
        types.Tool(name="pingback", description="Pings the client before answering.", input_schema=obj()),
    ],
]
# Listed as a fourth page with --more-tools.
MORE = [
    types.Tool(name="plain", description="Returns 42 as a plain value.", input_schema=obj()),
    types.Tool(name="plain_text", description="Returns a string as a plain value.", input_schema=obj()),
    types.Tool(name="task_required", description="Runs only as a task.", input_schema=obj(),
               execution=types.ToolExecution(task_support="required")),
    types.Tool(name="task_optional", description="Runs as a task or not.", input_schema=obj(),
               execution=types.ToolExecution(task_support="optional")),
]
# Listed as the last page with --progress-tools.
PROGRESS = [
    types.Tool(name="report", description="Reports progress and logs per step.",
               input_schema=obj(steps={"type": "integer"}, interval_ms={"type": "integer"})),
    types.Tool(name="flood", description="Floods progress and log lines.", input_schema=obj(count={"type": "integer"})),
    types.Tool(name="levels", description="Logs at every level.", input_schema=obj()),
]
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
ADDED = types.Tool(name="added", description="Listed after change.", input_schema=obj())
state = {"changed": False, "log_level": None}
args = None


def text(t):
    return types.TextContent(type="text", text=t)


async def list_tools(ctx, params):
    cursor = getattr(params, "cursor", None) if params else None
    page = int(cursor) if cursor else 0
    tools = list(PAGES[page])
    if page == 2 and state["changed"]:
        tools.append(ADDED)
    next_cursor = str(page + 1) if page + 1 < len(PAGES) else None
    return types.ListToolsResult(tools=tools, next_cursor=next_cursor)


async def call_tool(ctx, params):
    a = params.arguments or {}
    name = params.name
    if name == "echo":
        return types.CallToolResult(content=[text("echo: " + str(a.get("text", "")))])
    if name == "env":
        var = str(a.get("name", ""))
        return types.CallToolResult(content=[text(f"{var}={os.environ.get(var)} cwd={os.getcwd()}")])
    if name == "image":
        return types.CallToolResult(content=[
            text("a pixel:"),
            types.ImageContent(type="image", data=PNG_1X1, mime_type="image/png"),
        ])
    if name == "structured":
        return types.CallToolResult(content=[], structured_content={"city": a.get("city"), "temperature": 21})
    if name == "big":
        return types.CallToolResult(content=[text("z" * int(a.get("size", 0)))])
    if name == "fail":
        return types.CallToolResult(content=[text("the fixture failed on purpose")], is_error=True)
    if name == "slow":
        steps = int(a.get("steps", 3))
        interval = int(a.get("interval_ms", 100)) / 1000
        for i in range(steps):
            await anyio.sleep(interval)
            await ctx.session.report_progress(i + 1, steps, f"step {i + 1}")
        return types.CallToolResult(content=[text(f"done after {steps} steps")])
    if name == "report":
        steps = int(a.get("steps", 3))
        interval = int(a.get("interval_ms", 100)) / 1000
        for i in range(steps):
            await ctx.session.report_progress(i + 1, steps, f"step {i + 1}")
            await ctx.session.send_log_message("warning", f"warn {i + 1}", logger="fixture")
            await anyio.sleep(interval)
        return types.CallToolResult(content=[text(f"reported {steps} steps")])
    if name == "flood":
        count = int(a.get("count", 1000))
        for i in range(count):
            await ctx.session.report_progress(i + 1, count, f"flood {i + 1}")
            await ctx.session.send_log_message("error", f"line {i + 1}")
        return types.CallToolResult(content=[text("flooded")])
    if name == "levels":
        for level in LEVELS:
            await ctx.session.send_log_message(level, level)
        await ctx.session.send_log_message("error", {"code": 5, "why": "an object"}, logger="obj")
        return types.CallToolResult(content=[text(f"level set: {state['log_level']}")])
    if name == "hang":
        if args.cancel_marker:
            with open(args.cancel_marker + ".started", "w") as f:
                f.write("started\n")
        try:
            await anyio.sleep_forever()
        finally:
            sys.stderr.write("fixture: cancelled hang\n")
            sys.stderr.flush()
            if args.cancel_marker:
                with open(args.cancel_marker, "w") as f:
                    f.write("cancelled\n")
    if name == "crash":
        sys.stderr.write("fixture: crashing on request\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "change":
        state["changed"] = True
        await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=[text("changed")])
    if name == "added":
        return types.CallToolResult(content=[text("added tool called")])
    if name == "resource":
        return types.CallToolResult(content=[
            types.ResourceLink(type="resource_link", uri="file:///tmp/report.txt", name="report"),
            types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
                uri="file:///tmp/notes.txt", text="the notes", mime_type="text/plain")),
        ])
    if name == "pingback":
        await ctx.session.send_ping()
        return types.CallToolResult(content=[text("the client answered a ping")])
    if name == "plain":
        # What the SDK's MCPServer makes of a tool returning 42: the value as text, and
        # as structuredContent wrapped in "result".
        return types.CallToolResult(content=[text("42")], structured_content={"result": 42})
    if name == "plain_text":
        return types.CallToolResult(content=[text("hello")], structured_content={"result": "hello"})
    if name == "task_optional":
        return types.CallToolResult(content=[text("ran without a task")])
    if name == "dotted.name":
        return types.CallToolResult(content=[text("dotted")])
    return types.CallToolResult(content=[text(f"unknown tool {name}")], is_error=True)


RESOURCE_PAGES = [
    [
        types.Resource(uri="fixture://notes", name="notes", title="The notes", description="Some notes.",
                       mime_type="text/plain"),
        types.Resource(uri="fixture://pixel.png", name="pixel", mime_type="image/png", size=70),
    ],
    [
        types.Resource(uri="file:///tmp/report.txt", name="report", mime_type="text/plain"),
        types.Resource(uri="fixture://data.bin", name="data", mime_type="application/octet-stream", size=3),
    ],
]


async def list_resources(ctx, params):
    cursor = getattr(params, "cursor", None) if params else None
    page = int(cursor) if cursor else 0
    next_cursor = str(page + 1) if page + 1 < len(RESOURCE_PAGES) else None
    return types.ListResourcesResult(resources=RESOURCE_PAGES[page], next_cursor=next_cursor)


async def list_resource_templates(ctx, params):
    return types.ListResourceTemplatesResult(resource_templates=[
        types.ResourceTemplate(uri_template="fixture://greeting/{name}", name="greeting",
                               description="A greeting for a name.", mime_type="text/plain"),
    ])


async def read_resource(ctx, params):
    uri = str(params.uri)
    if uri == "fixture://notes":
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, text="the notes", mime_type="text/plain")])
    if uri == "file:///tmp/report.txt":
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, text="the report", mime_type="text/plain")])
    if uri == "fixture://pixel.png":
        return types.ReadResourceResult(contents=[
            types.BlobResourceContents(uri=uri, blob=PNG_1X1, mime_type="image/png")])
    if uri == "fixture://data.bin":
        return types.ReadResourceResult(contents=[
            types.BlobResourceContents(uri=uri, blob="AAEC", mime_type="application/octet-stream")])
    if uri.startswith("fixture://greeting/"):
        name = uri[len("fixture://greeting/"):]
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, text=f"hello {name}", mime_type="text/plain")])
    if uri == "fixture://hang":
        if args.cancel_marker:
            with open(args.cancel_marker + ".started", "w") as f:
                f.write("started\n")
        try:
            await anyio.sleep_forever()
        finally:
            if args.cancel_marker:
                with open(args.cancel_marker, "w") as f:
                    f.write("cancelled\n")
    if uri.startswith("fixture://env-error/"):
        var = uri[len("fixture://env-error/"):]
        raise MCPError(-32603, f"cannot read: the value is {os.environ.get(var)}")
    raise MCPError(-32002, f"no resource {uri}")


PROMPTS = [
    types.Prompt(name="greet", title="Greeting", description="Greets someone.", arguments=[
        types.PromptArgument(name="name", description="Who to greet.", required=True),
        types.PromptArgument(name="style", description="How."),
    ]),
    types.Prompt(name="picture", description="Shows a picture."),
]


async def list_prompts(ctx, params):
    return types.ListPromptsResult(prompts=PROMPTS)


async def get_prompt(ctx, params):
    a = params.arguments or {}
    if params.name == "greet":
        if "name" not in a:
            raise MCPError(-32602, "greet needs the argument name")
        style = f" in a {a['style']} way" if a.get("style") else ""
        return types.GetPromptResult(description="A greeting.", messages=[
            types.PromptMessage(role="user", content=text(f"Say hello to {a['name']}{style}")),
            types.PromptMessage(role="assistant", content=text(f"Hello, {a['name']}!")),
        ])
    if params.name == "picture":
        return types.GetPromptResult(messages=[
            types.PromptMessage(role="user", content=types.ImageContent(
                type="image", data=PNG_1X1, mime_type="image/png")),
            types.PromptMessage(role="user", content=types.EmbeddedResource(
                type="resource", resource=types.TextResourceContents(
                    uri="fixture://notes", text="the notes", mime_type="text/plain"))),
        ])
    raise MCPError(-32602, f"no prompt {params.name}")


async def set_level(ctx, params):
    state["log_level"] = params.level
    return types.EmptyResult()


def build():
    with warnings.catch_warnings():
        # The logging capability is deprecated in a revision panto does not speak yet.
        warnings.simplefilter("ignore")
        return Server("panto-fixture", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool,
                      on_set_logging_level=set_level, on_list_resources=list_resources,
                      on_list_resource_templates=list_resource_templates, on_read_resource=read_resource,
                      on_list_prompts=list_prompts, on_get_prompt=get_prompt)


async def serve_stdio(server):
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options(NotificationOptions(tools_changed=True)))


def serve_http(server):
    import uvicorn
    from starlette.responses import JSONResponse, PlainTextResponse

    app = server.streamable_http_app(json_response=args.json_response)
    manager = server.session_manager
    log = []
    required = args.require_header.split("=", 1) if args.require_header else None

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        path = scope["path"]
        if path == "/_log":
            await JSONResponse(log)(scope, receive, send)
            return
        if path == "/_expire":
            for sid, transport in list(manager._server_instances.items()):
                await manager._discard_session(sid, transport)
            await JSONResponse({"ok": True})(scope, receive, send)
            return
        log.append({
            "method": scope["method"],
            "accept": headers.get("accept"),
            "session": headers.get("mcp-session-id"),
            "version": headers.get("mcp-protocol-version"),
        })
        if required and headers.get(required[0].lower()) != required[1]:
            await PlainTextResponse("missing credentials", status_code=401)(scope, receive, send)
            return
        await app(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(wrapped, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def main():
    global args
    p = argparse.ArgumentParser()
    p.add_argument("--http", action="store_true")
    p.add_argument("--json-response", action="store_true")
    p.add_argument("--fail-start", action="store_true")
    p.add_argument("--spawn-child", action="store_true")
    p.add_argument("--require-header")
    p.add_argument("--cancel-marker")
    p.add_argument("--linger", action="store_true")
    p.add_argument("--more-tools", action="store_true")
    p.add_argument("--progress-tools", action="store_true")
    args = p.parse_args()
    if args.more_tools:
        PAGES.append(MORE)
    if args.progress_tools:
        PAGES.append(PROGRESS)
    if args.fail_start:
        sys.stderr.write("fixture: refusing to start (--fail-start)\n")
        sys.exit(2)
    child = None
    if args.spawn_child:
        child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
        sys.stderr.write(f"fixture: child {child.pid}\n")
        sys.stderr.flush()
    server = build()
    if args.linger:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.http:
        serve_http(server)
    else:
        anyio.run(serve_stdio, server)
    if args.linger:
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
