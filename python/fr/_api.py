"""The typed API over the tools: where they are, the analysis as dataclasses, snapshots."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

_HERE = os.path.dirname(os.path.abspath(__file__))

# fr-analyze's exit codes (docs/fr-analyze.md): 0 done; 5 done, the dump set mixes jobs.
_EXIT_DONE = 0
_EXIT_MIXED_JOBS = 5


class FrError(RuntimeError):
    """A tool refused or failed: ``code`` is its exit code, the message its reason."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def bin_dir() -> str:
    """The directory holding fr-run, frd and fr-analyze."""
    return os.path.join(_HERE, "bin")


def tool_path(name: str) -> str:
    """The path of one tool: "fr-run", "frd" or "fr-analyze"."""
    if name not in ("fr-run", "frd", "fr-analyze"):
        raise ValueError(f"no such tool: {name!r} (fr-run, frd, fr-analyze)")
    return os.path.join(bin_dir(), name)


def agent_path() -> str:
    """libfr_agent.so, for LD_PRELOAD (fr-run sets it for you)."""
    return os.path.join(_HERE, "lib", "libfr_agent.so")


def version() -> str:
    """The tools' version, as ``fr-analyze --version`` says it."""
    out = subprocess.run([tool_path("fr-analyze"), "--version"], capture_output=True, text=True)
    return out.stdout.strip().split()[-1] if out.returncode == 0 else "unknown"


@dataclass
class Communicator:
    """A communicator as every sentence names it."""

    id: str
    name: str = ""
    size: int = -1

    @classmethod
    def from_json(cls, j: Optional[Dict[str, Any]]) -> Optional["Communicator"]:
        if not isinstance(j, dict):
            return None
        return cls(id=str(j.get("id", "")), name=str(j.get("name", "")), size=int(j.get("size", -1)))


@dataclass
class Evidence:
    """One member's row under a verdict or finding: where it stood at the stalled op."""

    rank: Optional[int]
    rank_in_comm: Optional[int]
    host: str
    state: str
    culprit: bool
    alive: Optional[bool]
    last_enqueued: Optional[Dict[str, Any]] = None
    last_started: Optional[Dict[str, Any]] = None
    last_completed: Optional[Dict[str, Any]] = None
    stack: Optional[List[Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Evidence":
        return cls(
            rank=j.get("rank"),
            rank_in_comm=j.get("rank_in_comm"),
            host=str(j.get("host", "")),
            state=str(j.get("state", "")),
            culprit=bool(j.get("culprit", False)),
            alive=j.get("alive"),
            last_enqueued=j.get("last_enqueued"),
            last_started=j.get("last_started"),
            last_completed=j.get("last_completed"),
            stack=j.get("stack"),
            raw=j,
        )


@dataclass
class Frame:
    """One Python frame from torch's recorder: innermost first."""

    function: str
    file: str
    line: int

    @classmethod
    def from_json(cls, j: Any) -> Optional["Frame"]:
        if not isinstance(j, dict):
            return None
        return cls(function=str(j.get("function", "")), file=str(j.get("file", "")), line=int(j.get("line", 0) or 0))


@dataclass
class TorchView:
    """What torch's own recorder says of a finding's op: its process group and Python call site.

    ``joined`` is true where the group was joined to fr's communicator (an NCCL job with both
    views), false on torch's own dumps; ``issued_in_torch_only`` lists the ranks torch shows
    issuing the op while their flight log has no NCCL call for it."""

    pg_name: str = ""
    pg_desc: str = ""
    seq: Optional[int] = None
    joined: bool = False
    site_rank: Optional[int] = None
    call_site: Optional[Frame] = None
    frames: List[Frame] = field(default_factory=list)
    issued_in_torch_only: List[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, j: Any) -> Optional["TorchView"]:
        if not isinstance(j, dict):
            return None
        frames = [Frame.from_json(f) for f in j.get("frames") or []]
        return cls(
            pg_name=str(j.get("pg_name", "")),
            pg_desc=str(j.get("pg_desc", "")),
            seq=j.get("seq"),
            joined=bool(j.get("joined", False)),
            site_rank=j.get("site_rank"),
            call_site=Frame.from_json(j.get("call_site")),
            frames=[f for f in frames if f is not None],
            issued_in_torch_only=[int(r) for r in j.get("issued_in_torch_only") or []],
        )


@dataclass
class Finding:
    """The verdict, and each further finding, in one shape (kind, summary, where, who)."""

    kind: str
    summary: str
    culprit_ranks: List[int]
    comm: Optional[Communicator] = None
    seq: Optional[int] = None
    seq_kind: str = ""
    op: str = ""
    blocked_ranks: List[int] = field(default_factory=list)
    culprit_pids: List[int] = field(default_factory=list)
    consequence: bool = False
    evidence: List[Evidence] = field(default_factory=list)
    torch: Optional[TorchView] = None  # torch's process group and call site, where recorded
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Finding":
        return cls(
            kind=str(j.get("kind", "")),
            summary=str(j.get("summary", "")),
            culprit_ranks=[int(r) for r in j.get("culprit_ranks", [])],
            comm=Communicator.from_json(j.get("comm")),
            seq=j.get("seq"),
            seq_kind=str(j.get("seq_kind", "")),
            op=str(j.get("op", "")),
            blocked_ranks=[int(r) for r in j.get("blocked_ranks", [])],
            culprit_pids=[int(p) for p in j.get("culprit_pids", [])],
            consequence=bool(j.get("consequence", False)),
            evidence=[Evidence.from_json(e) for e in j.get("evidence") or [] if isinstance(e, dict)],
            torch=TorchView.from_json(j.get("torch")),
            raw=j,
        )


@dataclass
class Ranks:
    expected: int
    found: List[int]
    missing: List[int]
    dead: List[int]


@dataclass
class Skipped:
    """A file that could not be used, and why."""

    file: str
    error: str


@dataclass
class OtherJob:
    """Dumps of another job found beside this one's and left out."""

    job_id: str
    files: int


@dataclass
class Inputs:
    paths: List[str]
    files_read: int
    job_id: str
    skipped: List[Skipped]
    other_jobs: List[OtherJob]


@dataclass
class Analysis:
    """An fr-analysis/1 document as objects; ``raw`` is the document itself."""

    verdict: Finding
    findings: List[Finding]
    ranks: Ranks
    inputs: Inputs
    communicators: List[Dict[str, Any]]
    raw: Dict[str, Any] = field(repr=False)

    @property
    def mixed_jobs(self) -> bool:
        """True when the dump set held other jobs' dumps too (the verdict covers one job)."""
        return bool(self.inputs.other_jobs)

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "Analysis":
        if doc.get("schema") != "fr-analysis/1":
            raise FrError(f"not an fr-analysis/1 document: schema {doc.get('schema')!r}", 1)
        r = doc.get("ranks", {})
        i = doc.get("inputs", {})
        return cls(
            verdict=Finding.from_json(doc.get("verdict", {})),
            findings=[Finding.from_json(f) for f in doc.get("findings", [])],
            ranks=Ranks(
                expected=int(r.get("expected", 0)),
                found=list(r.get("found", [])),
                missing=list(r.get("missing", [])),
                dead=list(r.get("dead", [])),
            ),
            inputs=Inputs(
                paths=list(i.get("paths", [])),
                files_read=int(i.get("files_read", 0)),
                job_id=str(i.get("job_id", "")),
                skipped=[Skipped(str(s.get("file", "")), str(s.get("error", ""))) for s in i.get("skipped", [])],
                other_jobs=[OtherJob(str(o.get("job_id", "")), int(o.get("files", 0))) for o in i.get("other_jobs", [])],
            ),
            communicators=list(doc.get("communicators", [])),
            raw=doc,
        )


PathLike = Union[str, "os.PathLike[str]"]


def analyze(
    paths: Union[PathLike, Sequence[PathLike]],
    *,
    ranks: Sequence[int] = (),
    comm: Optional[str] = None,
    threads: int = 0,
) -> Analysis:
    """Analyses dump sets, dump files or PyTorch Flight Recorder dumps (one path or several,
    merged into one job) and returns the verdict, findings and evidence as objects.

    ``ranks`` and ``comm`` narrow what the evidence shows (``--rank``, ``--comm``); the verdict is
    always decided on everything. Raises FrError when nothing is readable (code 3) or the tool
    fails otherwise.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    argv = [tool_path("fr-analyze"), "--json"]
    for r in ranks:
        argv += ["--rank", str(int(r))]
    if comm:
        argv += ["--comm", comm]
    if threads:
        argv += ["--threads", str(int(threads))]
    argv += ["--"] + [os.fspath(p) for p in paths]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode not in (_EXIT_DONE, _EXIT_MIXED_JOBS):
        raise FrError(out.stderr.strip() or f"fr-analyze exited with {out.returncode}", out.returncode)
    return Analysis.from_json(json.loads(out.stdout))


def snapshot(
    out: PathLike,
    *,
    log_dir: PathLike = "/dev/shm",
    job_id: Optional[str] = None,
) -> str:
    """Copies this node's flight logs (of every process, or of one job) into a dump set at
    ``out`` with ``frd snapshot``, while the processes run; returns ``out``. Analyse it with
    ``fr.analyze(out)``."""
    argv = [tool_path("frd"), "snapshot", "--log-dir", os.fspath(log_dir), "--out", os.fspath(out)]
    if job_id:
        argv += ["--job-id", job_id]
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        raise FrError(res.stderr.strip() or f"frd snapshot exited with {res.returncode}", res.returncode)
    return os.fspath(out)
