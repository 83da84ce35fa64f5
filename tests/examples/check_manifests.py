#!/usr/bin/env python3
"""What the Kubernetes examples promise beyond the schema, checked on the parsed manifests.

Every container image carries a pinned tag (never :latest, never none); every container sets
requests and limits for cpu and memory; every long-running fr container (the coordinator, the
node daemon as sidecar or DaemonSet) has liveness and readiness probes; a training Job is Indexed,
has a headless Service for rendezvous and, unless `frd node` runs as a DaemonSet, carries the node
daemon as a native sidecar (an init container with restartPolicy Always) that shares /dev/shm
with the trainer and the pod's process namespace; the agent comes from an init container; the
token comes from a Secret.

usage: check_manifests.py FILE...   exit 0 when all hold, 1 with one line per broken promise.
"""
import sys

import yaml

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def pod_spec(doc):
    kind = doc.get("kind")
    if kind in ("Deployment", "DaemonSet", "Job", "StatefulSet"):
        return doc["spec"]["template"]["spec"]
    if kind == "Pod":
        return doc["spec"]
    return None


def check_container(where, c, long_running):
    image = c.get("image", "")
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or not tag or tag == "latest":
        problem(where, f"image {image!r} has no pinned tag")
    res = c.get("resources", {})
    for part in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in res.get(part, {}):
                problem(where, f"no {part}.{r}")
    if long_running:
        for probe in ("livenessProbe", "readinessProbe"):
            if probe not in c:
                problem(where, f"no {probe}")


def is_frd(c):
    return "fr-frd" in c.get("image", "")


def check_file(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kinds = {d["kind"] for d in docs}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    has_daemonset = "DaemonSet" in kinds
    for doc in docs:
        spec = pod_spec(doc)
        if spec is None:
            continue
        where = f"{path}: {doc['kind']}/{doc['metadata']['name']}"
        inits = spec.get("initContainers", [])
        mains = spec.get("containers", [])
        for c in inits:
            sidecar = c.get("restartPolicy") == "Always"
            check_container(f"{where} init {c['name']}", c, sidecar and is_frd(c))
        for c in mains:
            long_running = doc["kind"] in ("Deployment", "DaemonSet") and is_frd(c)
            check_container(f"{where} {c['name']}", c, long_running)
        secret_volumes = [v for v in spec.get("volumes", []) if "secret" in v]
        uses_frd = any(is_frd(c) for c in inits + mains)
        if uses_frd and not secret_volumes:
            problem(where, "fr runs without the token Secret")
        if doc["kind"] != "Job":
            continue
        job = doc["spec"]
        if job.get("completionMode") != "Indexed":
            problem(where, "the training Job is not Indexed")
        sub = spec.get("subdomain")
        svc = services.get(sub)
        if not svc or svc["spec"].get("clusterIP") != "None":
            problem(where, f"no headless Service {sub!r} for the rendezvous")
        if spec.get("restartPolicy") == "Always":
            problem(where, "a Job's pods cannot restart Always")
        if not any("fr-agent-init" in c.get("image", "") for c in inits):
            problem(where, "no agent init container")
        env = {e["name"]: e.get("value") for c in mains for e in c.get("env", [])}
        if "libfr_agent.so" not in (env.get("LD_PRELOAD") or ""):
            problem(where, "the trainer does not preload the agent")
        if any(is_frd(c) for c in mains):
            problem(where, "frd node is an ordinary container: the Job could never complete")
        if has_daemonset:
            continue
        sidecars = [c for c in inits if is_frd(c) and c.get("restartPolicy") == "Always"]
        if not sidecars:
            problem(where, "no native sidecar (init container with restartPolicy Always) for frd node")
            continue
        if not spec.get("shareProcessNamespace"):
            problem(where, "the sidecar does not share the process namespace")
        log_dir = env.get("FR_LOG_DIR")
        trainer_mounts = {m["mountPath"]: m["name"] for c in mains for m in c.get("volumeMounts", [])}
        side_mounts = {m["mountPath"]: m["name"] for m in sidecars[0].get("volumeMounts", [])}
        if log_dir not in trainer_mounts or trainer_mounts.get(log_dir) != side_mounts.get(log_dir):
            problem(where, f"the sidecar does not share the trainer's {log_dir}")


for p in sys.argv[1:]:
    check_file(p)
for line in problems:
    print(line)
sys.exit(1 if problems else 0)
