"""The learner's progress: which tasks have passed `coursekit check`.

Kept in a JSON state file (COURSEKIT_STATE, default `.coursekit/progress.json` in the
repository) keyed by `ASSIGNMENT/TASK` — nbgrader ids, so renaming or reordering notebooks
loses nothing. `coursekit progress` prints it, `coursekit next` names the next task,
`coursekit solution` reveals a passed task's reference solution; in JupyterLab,
`course/progress.ipynb` shows the same as a dashboard.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..pins import ROOT
from . import exercises


def state_path() -> Path:
    return Path(os.environ.get("COURSEKIT_STATE") or ROOT / ".coursekit" / "progress.json")


def load() -> dict:
    try:
        data = json.loads(state_path().read_text())
        return data if isinstance(data.get("tasks"), dict) else {"tasks": {}}
    except (OSError, ValueError, AttributeError):
        return {"tasks": {}}


def save_results(passed: dict[str, bool]) -> None:
    """Record check results by task key: a pass is kept, a later failure is recorded too."""
    state = load()
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    for key, ok in passed.items():
        entry = state["tasks"].setdefault(key, {})
        entry.update(passed=ok, checked=now)
        if ok:
            entry.setdefault("first_passed", now)
    _save(state)


def _save(state: dict) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, path)


def next_hint(task: exercises.Task, levels: int) -> int:
    """The level of hint to show now (0-based), counting this one as seen."""
    state = load()
    entry = state["tasks"].setdefault(task.key, {})
    level = min(int(entry.get("hints_seen", 0)), levels - 1)
    entry["hints_seen"] = level + 1
    _save(state)
    return level


def done(task: exercises.Task, state: dict | None = None) -> bool:
    return bool((state or load())["tasks"].get(task.key, {}).get("passed"))


def summary() -> list[tuple[str, str, int, int]]:
    """(assignment, notebook, tasks done, tasks) in course order."""
    state = load()
    rows: dict[tuple[str, str], list[int]] = {}
    for t in exercises.all_tasks():
        row = rows.setdefault((t.assignment, t.notebook), [0, 0])
        row[0] += done(t, state)
        row[1] += 1
    return [(a, nb, d, n) for (a, nb), (d, n) in rows.items()]


def table() -> str:
    lines = [f"{'exercise':56} done", "-" * 66]
    total_done = total = 0
    for assignment, notebook, d, n in summary():
        bar = "#" * d + "." * (n - d)
        lines.append(f"{assignment + '/' + notebook:56} {d}/{n} {bar}")
        total_done, total = total_done + d, total + n
    lines += ["-" * 66, f"{'all exercises':56} {total_done}/{total}"]
    return "\n".join(lines)


def next_task() -> exercises.Task | None:
    state = load()
    return next((t for t in exercises.all_tasks() if not done(t, state)), None)


def dashboard():
    """An ipywidgets view of the progress, for course/progress.ipynb."""
    import ipywidgets as w

    rows = [w.HTML("<b>Your progress</b> (updated by <code>coursekit check</code>)")]
    for assignment, notebook, d, n in summary():
        bar = w.IntProgress(value=d, min=0, max=n, bar_style="success" if d == n else "info")
        rows.append(
            w.HBox(
                [
                    w.Label(f"{assignment}/{notebook}", layout=w.Layout(width="420px")),
                    bar,
                    w.Label(f"{d}/{n}"),
                ]
            )
        )
    nxt = next_task()
    rows.append(
        w.HTML(
            f"Next: <code>{exercises.exercise_path(nxt).relative_to(ROOT)}</code> — {nxt.title or nxt.id}"
            if nxt
            else "All tasks done."
        )
    )
    return w.VBox(rows)
