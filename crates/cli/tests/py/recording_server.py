"""A raw MCP server that records, in order, every notification it receives.

Usage: python recording_server.py LOG [PORT]

Without PORT it speaks stdio (one JSON-RPC message a line); with PORT, streamable HTTP at
http://127.0.0.1:PORT/mcp, each POST answered on its own thread (so POSTs sent at once are
handled at once, in whatever order they come). It answers `initialize` (in the era the client
asked for), `tools/list` (no tools) and `ping`; every notification is appended to LOG as one JSON
line, flushed at once, in the order it was received. Nothing else: the order test needs a server
that keeps what it saw.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()


def record(log, message):
    with LOCK:
        log.write(json.dumps({"method": message["method"], "params": message.get("params")}) + "\n")
        log.flush()


def answer(message):
    """The answer to a request, or None for a notification or a response."""
    if "id" not in message or "method" not in message:
        return None
    method = message["method"]
    if method == "initialize":
        version = (message.get("params") or {}).get("protocolVersion", "2025-11-25")
        result = {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "recording", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": []}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": message["id"],
                "error": {"code": -32601, "message": f"method not found: {method}"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def serve_stdio(log):
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "id" not in message and "method" in message:
            record(log, message)
        reply = answer(message)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


def serve_http(log, port):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            try:
                message = json.loads(self.rfile.read(length))
            except ValueError:
                self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if "id" not in message and "method" in message:
                record(log, message)
            reply = answer(message)
            if reply is None:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if message.get("method") == "initialize":
                self.send_header("Mcp-Session-Id", "recording-session")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            # No standalone event stream.
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_DELETE(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    with open(sys.argv[1], "a", encoding="utf-8") as log_file:
        if len(sys.argv) > 2:
            serve_http(log_file, int(sys.argv[2]))
        else:
            serve_stdio(log_file)
