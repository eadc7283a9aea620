"""A raw stdio MCP server with tasks, for the front's task tests (stdlib only).

One tool, `work`: called with `task`, it answers at once with a new task (`t-1`, `t-2`, ...),
which is completed. `tasks/get`, `tasks/result`, `tasks/cancel` answer for a task it made and
-32602 for any other; `tasks/list` lists every task it made; `logging/setLevel` is appended to
the file named by its first argument (one level a line), so a test sees what reached it.
"""

import json
import sys

TASKS = []
LEVELS = sys.argv[1] if len(sys.argv) > 1 else None


def task(task_id):
    return {"taskId": task_id, "status": "completed", "createdAt": "2025-01-01T00:00:00Z",
            "lastUpdatedAt": "2025-01-01T00:00:00Z", "ttl": 60000}


def answer(method, params):
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}, "logging": {},
                                 "tasks": {"list": {}, "cancel": {},
                                           "requests": {"tools": {"call": {}}}}},
                "serverInfo": {"name": "tasks", "version": "1"}}
    if method == "tools/list":
        return {"tools": [{"name": "work", "inputSchema": {"type": "object"},
                           "execution": {"taskSupport": "optional"}}]}
    if method == "tools/call":
        if "task" not in params:
            return {"content": [{"type": "text", "text": "done"}]}
        task_id = "t-%d" % (len(TASKS) + 1)
        TASKS.append(task_id)
        return {"task": task(task_id)}
    if method == "tasks/list":
        return {"tasks": [task(t) for t in TASKS]}
    if method in ("tasks/get", "tasks/cancel", "tasks/result"):
        task_id = params.get("taskId")
        if task_id not in TASKS:
            raise LookupError("Failed to retrieve task: Task not found")
        if method == "tasks/result":
            return {"content": [{"type": "text", "text": "result of " + task_id}]}
        return task(task_id)
    if method == "logging/setLevel":
        if LEVELS:
            with open(LEVELS, "a") as levels:
                levels.write(params.get("level", "") + "\n")
        return {}
    if method == "ping":
        return {}
    raise NotImplementedError(method)


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    reply = {"jsonrpc": "2.0", "id": message["id"]}
    try:
        reply["result"] = answer(message["method"], message.get("params") or {})
    except LookupError as error:
        reply["error"] = {"code": -32602, "message": str(error)}
    except NotImplementedError as error:
        reply["error"] = {"code": -32601, "message": "Method not found: %s" % error}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
