"""The one definition of the messages between the host and a worker, and between a
worker's supervisor and the children it runs.

Both sides import these names: the host (runner/types.py builds requests from
REQUEST_FIELDS and reads replies through RESULT_FIELDS; runner/backends reads every
frame through protocol.FrameReader) and the worker program (stdlib only, copied into
sandbox images). A field added to a reply here and to `ExecutionResult` arrives; a test
checks that the two agree, so a field can no longer be silently dropped on the way.

Host -> worker messages carry `type` and `id`; the worker answers every one with a
message of the matching reply type and the same `id`.

Child -> supervisor reports (on the child's result pipe, framed like everything else):
  {"kind": "denied", "message": ...}  sent the moment a guard refuses something; sticky:
                                      once sent, the run is `denied` whatever follows
  {"kind": "report", "outcome": {...}} the end of one request: OUTCOME_KINDS below
"""

from __future__ import annotations

# -- host -> worker ----------------------------------------------------------------------
RUN = "run"                      # one request in a fresh child
SESSION_RUN = "session_run"      # one block in the session child (started on first use)
SESSION_CLOSE = "session_close"  # end the session child
PING = "ping"

# -- worker -> host ----------------------------------------------------------------------
READY = "ready"                  # first message after start: pid, executor, versions...
RESULT = "result"                # the answer to RUN and SESSION_RUN
SESSION_CLOSED = "session_closed"
PONG = "pong"
ERROR = "error"                  # the worker could not understand a message

# In a container's READY: bytes of memory the warm worker holds (cgroup.memory_in_use).
MEMORY_IN_USE = "memory_in_use"

REPLY_TYPES = {RUN: RESULT, SESSION_RUN: RESULT, SESSION_CLOSE: SESSION_CLOSED, PING: PONG}

# The work a request carries (besides `type` and `id`).
REQUEST_FIELDS = ("code", "limits", "preamble", "call", "filename", "files")
# The fields of `Limits` the worker reads.
LIMIT_FIELDS = ("timeout_s", "cpu_s", "memory_mb", "max_output_bytes", "max_processes",
                "max_open_files", "max_file_size_mb", "disk_mb", "max_returned_files_mb")

# The jail tier's directory per run (Limits.disk_mb), until a request says otherwise.
DEFAULT_DISK_MB = 128
# The most a run may return in files (attachments of its report, which holds MAX_REPORT_BYTES).
MAX_RETURNED_FILES_MB = 20

# What a RESULT carries: every one is a field of `ExecutionResult` of the same name,
# except SESSION_STARTED (the host's session reads it).
RESULT_FIELDS = ("status", "exit_code", "stdout", "stderr", "stdout_truncated",
                 "stderr_truncated", "error", "return_value", "return_repr", "return_is_repr",
                 "duration_ms", "resources", "files", "files_truncated", "files_left_out")
# What a report's outcome may carry of the files a run made (worker/run_files.py); the
# host reads "files" ([[name, index], ...], the bytes being the reply's attachments:
# protocol.BLOBS) through runner.files.decode_outputs. A request's "files" are the same.
FILE_FIELDS = ("files", "files_truncated", "files_left_out")
SESSION_STARTED = "session_started"
# A session block's number, sent by the supervisor with the block and echoed in its
# report, so that a report left over from an earlier block is never taken for this one.
SEQ = "seq"
RESOURCE_FIELDS = ("cpu_ms", "max_rss_kb", "isolation")
# What `resources.isolation` may say (runner.types.Isolation): the layers in place.
ISOLATION = "isolation"
ISOLATION_FIELDS = ("tier", "namespaces", "per_run", "unprivileged", "landlock_abi", "seccomp",
                    "policy", "audit_hook", "container")
ERROR_FIELDS = ("type", "message", "traceback")

# -- child -> supervisor -----------------------------------------------------------------
CHILD_READY = "child_ready"  # set up and waiting for its request (limits may be set now)
DENIED = "denied"
REPORT = "report"
# What a child may say about how its request ended; everything else (timeout, memory,
# crash, output, timings) is what the supervisor observed itself.
OUTCOME_KINDS = frozenset({"ok", "error", "exit", "denied", "internal"})

# How a child ends when its result channel was closed or replaced by the code it ran: it
# cannot report, and its status must not be what an earlier (forged) report said.
CHANNEL_REPLACED_EXIT = 71

# The largest report a child may send (its return value and error included).
MAX_REPORT_BYTES = 32 * 1024 * 1024

# Statuses (the same vocabulary as runner.types.Status).
STATUSES = ("ok", "error", "timeout", "memory_limit", "denied", "invalid_args",
            "install_failed", "crashed")
