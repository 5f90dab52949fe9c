"""Turning what evcxr sends into Jupyter outputs that every tool understands.

- Marker lines the prelude prints on stdout (`\\x1ecoursekit KIND ID ARG BODY`: the
  cell's print!, eprint!, display_*) become streams or display_data, in the order the cell
  printed them. The ID of the cell's last one comes as content (LAST_MIME), before the
  cell's reply: `settled` says whether that line has arrived.
- What the prelude sends as evcxr content (an execute_result of its own MIME types):
  shared values, and the error that `?` returned from the cell.
- A panic, which evcxr reports only as stderr text with status "ok" (or, in the course
  kernel, the prelude's panic hook as an execute_result of PANIC_MIME), becomes an error;
  so does an error that `?` returned from the cell.
- evcxr's errors (always ename "Error") get names that say what happened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote

MARKER = "\x1ecoursekit "
# What the prelude sends as evcxr "content", which arrives before the cell's reply (stdout
# lines are relayed from another thread and could come later): the same names in the prelude.
OWN_MIME = "application/x-coursekit-"
PANIC_MIME = OWN_MIME + "panic"  # the prelude's panic hook
ERROR_MIME = OWN_MIME + "error"  # the error a cell returned with `?`
SHARE_MIME_PREFIX = OWN_MIME + "share+"  # share(name, value): the name follows, %-escaped
LAST_MIME = OWN_MIME + "last"  # the ID of the cell's last marker line
# evcxr's own markers of a content block: the prelude writes each block's body on one line,
# so a marker inside a block, or in its MIME type, was printed by the cell's code to pass
# its own output off as the prelude's (or to swallow the prelude's panic report).
EVCXR_MARKERS = re.compile("EVCXR_(?:BEGIN|END)_CONTENT")
FORGED = "ForgedOutput"


def _ours(mime: str) -> bool:
    """Content for this kernel (the harness's proof of a passed test stays in the outputs)."""
    return mime in (PANIC_MIME, ERROR_MIME, LAST_MIME) or mime.startswith(SHARE_MIME_PREFIX)


_PANIC = re.compile(
    r"thread '[^']*'(?: \(\d+\))? panicked(?: at [^\n]*)?:\n"
    r"(?P<msg>.*?)(?:\nnote: run with `RUST_BACKTRACE|\nstack backtrace:|\Z)",
    re.S,
)
# Rust prints the OS thread id in a panic's first line; it changes from run to run.
_THREAD_ID = re.compile(r"(thread '[^']*') \(\d+\)(?= panicked at)")
# evcxr forces RUST_BACKTRACE=1 on its runner; the frames of a cell are all <unknown>.
_BACKTRACE_START = "stack backtrace:\n"
_BACKTRACE_END = "note: Some details are omitted"


def _unescape(body: str) -> str:
    return re.sub(r"\\([\\nr])", lambda m: {"\\": "\\", "n": "\n", "r": "\r"}[m.group(1)], body)


@dataclass
class CellOutputs:
    """Accumulates one Rust cell's outputs and what they say about its outcome."""

    code: str = ""  # the cell's source, to name the line of a compile error
    shared: dict = field(default_factory=dict)
    stderr: str = ""
    errors: list = field(default_factory=list)
    in_backtrace: bool = False
    returned_error: str | None = None  # what `?` returned from the cell
    last_line: str | None = None  # the ID of the cell's last marker line (LAST_MIME)
    forged: bool = False  # the cell's code imitated evcxr's content markers
    seen_line: str | None = None  # the ID of the last marker line that arrived

    def settled(self) -> bool:
        """Every marker line the cell printed has arrived."""
        return self.last_line is None or self.seen_line == self.last_line

    def translate(self, msg_type: str, content: dict) -> list[tuple[str, dict]]:
        """The messages to publish for one message of the child (maybe none)."""
        if msg_type == "error":
            self.errors.append(content)
            return []  # published once the cell is over, with a clear name
        if msg_type in ("execute_result", "display_data") and _imitates_markers(content.get("data", {})):
            self.forged = True
            return []
        if msg_type == "execute_result" and any(_ours(m) for m in content.get("data", {})):
            data = dict(content["data"])
            out = []
            for mime in [m for m in data if _ours(m)]:
                body = _unescape(data.pop(mime).strip("\n"))
                if mime == PANIC_MIME:
                    self.stderr += body
                    out.append(("stream", {"name": "stderr", "text": body}))
                elif mime == ERROR_MIME:  # already shown: its eprintln! line came as stderr
                    self.returned_error = body.strip()
                elif mime == LAST_MIME:
                    self.last_line = body.strip()
                elif mime.startswith(SHARE_MIME_PREFIX):
                    self.shared[unquote(mime.removeprefix(SHARE_MIME_PREFIX))] = body
            return out + [(msg_type, dict(content, data=data))] if data else out
        if msg_type != "stream":
            return [(msg_type, content)]
        if content["name"] == "stderr":
            text = self._drop_backtrace(content["text"])
            self.stderr += text
            return [("stream", {"name": "stderr", "text": text})] if text else []
        return self._split_stdout(content["text"])

    def _drop_backtrace(self, text: str) -> str:
        kept = []
        for line in _lines(_THREAD_ID.sub(r"\1", text)):
            if line == _BACKTRACE_START:
                self.in_backtrace = True
            elif not self.in_backtrace:
                kept.append(line)
            elif line.startswith(_BACKTRACE_END) or not line.startswith(" "):
                self.in_backtrace = False
                if not line.startswith(_BACKTRACE_END):
                    kept.append(line)
        return "".join(kept)

    def _split_stdout(self, text: str) -> list[tuple[str, dict]]:
        out: list[tuple[str, dict]] = []

        def stream(name, chunk):
            if not chunk:
                return
            if out and out[-1][0] == "stream" and out[-1][1]["name"] == name:
                out[-1][1]["text"] += chunk
            else:
                out.append(("stream", {"name": name, "text": chunk}))

        for line in _lines(text):
            before, marker, rest = line.partition(MARKER)
            stream("stdout", before)
            if not marker:
                continue
            kind, line_id, arg, body = (rest.rstrip("\n").split(" ", 3) + ["", "", ""])[:4]
            self.seen_line = line_id
            body = _unescape(body)
            if kind == "stdout":
                stream("stdout", body)
            elif kind == "stderr":
                self.stderr += body
                stream("stderr", body)
            elif kind == "display":
                out.append(("display_data", {"data": {arg: body}, "metadata": {}}))
        return out

    def outcome(self, reply_status: str, interrupted: bool) -> dict | None:
        """The error (ename, evalue, traceback) this cell ends with, or None."""
        if self.forged:
            why = "the cell's output imitated evcxr's own output markers (EVCXR_BEGIN_CONTENT)"
            return error_output(FORGED, why)
        if self.errors:
            evalue = self.errors[0].get("evalue", "")
            traceback = [line for e in self.errors for line in e.get("traceback", [])]
            if "Subprocess terminated" in evalue or "child process" in evalue.lower():
                if interrupted:
                    return error_output("KeyboardInterrupt", "interrupted: " + LOST, [evalue])
                return error_output("RustProcessExited", f"{evalue.strip()}: {LOST}", traceback)
            if any(_is_compile_error(e) for e in self.errors):
                messages = "; ".join(e.get("evalue", "").strip() for e in self.errors)
                reports = (_located(e.get("traceback", []), self.code) for e in self.errors)
                traceback = [line for report in reports for line in report]
                return error_output("CompileError", messages, traceback)
            return error_output("EvcxrError", evalue.strip(), traceback)
        panic = _PANIC.search(self.stderr)
        if panic:
            message = panic.group("msg").strip()
            return error_output("RustPanic", message, ["Rust code panicked: " + message])
        if self.returned_error is not None:
            return error_output(
                "RustError",
                self.returned_error,
                ["the cell returned an error with `?`: " + self.returned_error],
            )
        if reply_status == "error":
            return error_output("EvcxrError", "evcxr reported an error without details", [])
        return None


def _imitates_markers(data: dict) -> bool:
    return any(EVCXR_MARKERS.search(f"{mime} {value}") for mime, value in data.items())


def _lines(text: str) -> list[str]:
    """Lines with their ends (str.splitlines would also split at the marker's \\x1e)."""
    return [line for line in re.split(r"(?<=\n)", text) if line]


UNAVAILABLE = "the Rust kernel is unavailable"  # evcxr could not start (the grader's fault)
UNAVAILABLE_NAME = "KernelUnavailable"  # its error's name, which no cell's code can choose
LOST = "the Rust process restarted and all Rust variables were lost (items such as fn and struct remain)"


def _is_compile_error(error: dict) -> bool:
    # Compiler diagnostics come with a source report (several traceback lines).
    return len(error.get("traceback", [])) > 1 or "error[" in "".join(error.get("traceback", []))


# evcxr's report of a compile error opens with `╭─[ command_N:1:1 ]`, the start of the cell,
# whatever line the error is on; the lines it quotes carry their numbers in the gutter.
_HEADER = re.compile(r"command_\d+:1:1")
_GUTTER = re.compile(r"^\s*(\d+)\s*│")


def _located(traceback: list[str], code: str) -> list[str]:
    """A compile error's report, saying on which line of the cell each part of it is."""
    plain = [ANSI.sub("", line) for line in traceback]
    headers = [i for i, line in enumerate(plain) if _HEADER.search(line)]
    if headers:
        located = list(traceback)
        for i in headers:
            numbers = (_GUTTER.match(line) for line in plain[i + 1 :])
            line_no = next((m.group(1) for m in numbers if m), None)
            located[i] = _HEADER.sub(f"line {line_no} of your cell" if line_no else "your cell", located[i])
        return located
    # Cells that are not pure ASCII get no report: evcxr quotes the source lines instead.
    lines = code.split("\n")
    quoted = next((line for line in plain if line.strip() and line in lines), None)
    if quoted is not None and lines.count(quoted) == 1:
        return [f"at line {lines.index(quoted) + 1} of your cell:"] + traceback
    return traceback


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def error_output(ename: str, evalue: str, traceback: list[str] = ()) -> dict:
    """A Jupyter error; its traceback defaults to the one line `ename: evalue`."""
    return {"ename": ename, "evalue": evalue, "traceback": list(traceback) or [f"{ename}: {evalue}"]}
