"""An OAuth-protected MCP server for panto's tests, written with the `mcp` package's
server-side auth support (tests/mcp/venv.sh): one process is both the resource server
(Streamable HTTP at /mcp, bearer tokens checked by the SDK's middleware, its 401 naming
the RFC 9728 protected-resource metadata) and its authorization server (the SDK's RFC
8414 metadata, /authorize, /token, /register for dynamic client registration), on
127.0.0.1, port 0: the port it got is printed as "PORT <n>" on stdout.

The authorization server approves every authorization request at once (the test's
"browser" follows the authorization URL to panto's loopback redirect), issues access
tokens that live --token-ttl seconds (default 3600) with refresh tokens for the
authorization code grant, and binds every token to the resource asked for (RFC 8707):
the resource server refuses a token issued for another. The SDK has no client
credentials grant; this server adds it at /token for the client `panto-cc` with the
secret `cc-secret-0123456789` (Basic or form authentication).

Tools: whoami, answering "client <client_id> resource <resource>"; leak, answering
"your token is <the bearer token>" (for redaction tests).

Test endpoints: GET /_grants lists the grant types the token endpoint granted, in
order; GET /_tokens every access and refresh token issued (for tests that check none
is shown); POST /_revoke_access makes every access token invalid (the next request is
a 401, and a client refreshes).
"""

import base64
import secrets
import socket
import time
import warnings
from urllib.parse import parse_qs, unquote

import mcp_types as types
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    ProviderTokenVerifier,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.lowlevel import Server
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.responses import JSONResponse

CC_CLIENT = "panto-cc"
CC_SECRET = "cc-secret-0123456789"


class Provider:
    def __init__(self, ttl):
        self.ttl = ttl
        self.clients = {}
        self.codes = {}
        self.access = {}
        self.refresh = {}
        self.grants = []
        self.issued = []

    async def get_client(self, client_id):
        return self.clients.get(client_id)

    async def register_client(self, client_info):
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client, params):
        code = "code-" + secrets.token_hex(16)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=client.client_id,
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client, code):
        return self.codes.get(code)

    def issue(self, client_id, scopes, resource, grant, with_refresh):
        self.grants.append(grant)
        access = "at-" + secrets.token_hex(20)
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time()) + self.ttl, resource=resource)
        self.issued.append(access)
        refresh = None
        if with_refresh:
            refresh = "rt-" + secrets.token_hex(20)
            self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
            self.issued.append(refresh)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.ttl,
                          scope=" ".join(scopes) or None, refresh_token=refresh)

    async def exchange_authorization_code(self, client, authorization_code):
        self.codes.pop(authorization_code.code, None)
        return self.issue(client.client_id, authorization_code.scopes, authorization_code.resource,
                          "authorization_code", True)

    async def load_refresh_token(self, client, refresh_token):
        t = self.refresh.get(refresh_token)
        return t if t and t.client_id == client.client_id else None

    async def exchange_refresh_token(self, client, refresh_token, scopes, resource=None):
        self.refresh.pop(refresh_token.token, None)
        return self.issue(client.client_id, scopes or refresh_token.scopes, resource or refresh_token.resource,
                          "refresh_token", True)

    async def load_access_token(self, token):
        t = self.access.get(token)
        if t is None or (t.expires_at is not None and t.expires_at < time.time()):
            return None
        return t

    async def revoke_token(self, token):
        self.access.pop(getattr(token, "token", ""), None)
        self.refresh.pop(getattr(token, "token", ""), None)


async def list_tools(ctx, params):
    empty = {"type": "object", "properties": {}}
    return types.ListToolsResult(tools=[
        types.Tool(name="whoami", description="Names the client of the token.", input_schema=empty),
        types.Tool(name="leak", description="Answers the bearer token it was sent.", input_schema=empty),
    ])


async def call_tool(ctx, params):
    token = get_access_token()
    if params.name == "leak":
        text = f"your token is {token.token if token else None}"
    else:
        text = f"client {token.client_id if token else None} resource {token.resource if token else None}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def client_credentials(provider, headers, form, resource_url):
    """The client credentials grant the SDK lacks: (status, JSON body)."""
    client_id, secret = form.get("client_id"), form.get("client_secret")
    auth = headers.get("authorization", "")
    if auth.startswith("Basic "):
        try:
            client_id, secret = (unquote(p) for p in base64.b64decode(auth[6:]).decode().split(":", 1))
        except Exception:
            return 401, {"error": "invalid_client", "error_description": "bad Basic credentials"}
    if client_id != CC_CLIENT or secret != CC_SECRET:
        return 401, {"error": "invalid_client", "error_description": "unknown client or wrong secret"}
    resource = form.get("resource")
    if resource != resource_url:
        return 400, {"error": "invalid_target", "error_description": f"resource must be {resource_url}"}
    scopes = (form.get("scope") or "").split()
    return 200, provider.issue(client_id, scopes, resource, "client_credentials", False).model_dump(exclude_none=True)


def main():
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--token-ttl", type=int, default=3600)
    args = p.parse_args()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    resource_url = f"{base}/mcp"

    provider = Provider(args.token_ttl)
    provider.clients[CC_CLIENT] = OAuthClientInformationFull(
        client_id=CC_CLIENT, client_secret=CC_SECRET, grant_types=["client_credentials"],
        token_endpoint_auth_method="client_secret_basic", redirect_uris=None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = Server("panto-oauth-fixture", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
        settings = AuthSettings(
            issuer_url=base, resource_server_url=resource_url, validate_token_resource=True,
            client_registration_options=ClientRegistrationOptions(enabled=True))
    app = server.streamable_http_app(auth=settings, token_verifier=ProviderTokenVerifier(provider),
                                     auth_server_provider=provider)

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path == "/_grants":
            await JSONResponse(provider.grants)(scope, receive, send)
            return
        if path == "/_tokens":
            await JSONResponse(provider.issued)(scope, receive, send)
            return
        if path == "/_revoke_access" and method == "POST":
            provider.access.clear()
            await JSONResponse({"ok": True})(scope, receive, send)
            return
        if path == "/token" and method == "POST":
            body = b""
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            form = {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}
            if form.get("grant_type") == "client_credentials":
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                status, answer = client_credentials(provider, headers, form, resource_url)
                await JSONResponse(answer, status_code=status,
                                   headers={"cache-control": "no-store"})(scope, receive, send)
                return
            sent = False

            async def replay():
                nonlocal sent
                if sent:
                    return {"type": "http.disconnect"}
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            await app(scope, replay, send)
            return
        await app(scope, receive, send)

    print(f"PORT {port}", flush=True)
    # Connections kept open longer than any pause of a slow client (valgrind): uvicorn's
    # 5 s default closes an idle connection just as a client may reuse it.
    config = uvicorn.Config(wrapped, log_level="warning", lifespan="on", timeout_keep_alive=300)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
