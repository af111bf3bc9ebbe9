#!/usr/bin/env python3
"""Checks deploy/k8s and deploy/Containerfile against the service's real
interface, read from its sources (no cluster, no image build):

  k8s_check.py manifests SOURCE_DIR      the manifests (test_k8s_interface)
  k8s_check.py containerfile SOURCE_DIR [GIANT_BINARY]   the Containerfile

manifests:
  - every GIANT_* variable the manifests set (ConfigMaps, env) is a setting
    of server/base/settings.c (or a variable server/**/*.c reads with getenv), with
    an integer in the setting's range where it is one;
  - every probe path is a GET route of server/routes/routes.c that needs no token,
    readiness is /readyz and liveness /healthz; the model-pull script's URL
    is a GET route too;
  - the port: GIANT_LISTEN's is the default of settings.c's listen, and
    every containerPort, Service and URL names that port; with
    GIANT_ADMIN_LISTEN (the admin listener, cmd_serve.c) on a reachable
    address and another port, every probe and the prometheus.io/port
    annotation use that port (containerPort 'admin'), each probe's path is
    one the admin listener serves (routes_register_admin), and no Service
    exposes it; without it, probes and scrapes use the API's port;
  - selectors, the StatefulSet's headless Service, the HPA's target, every
    ConfigMap, Secret and volume a pod refers to exist; the kustomization
    lists every manifest file;
  - the trainer has one replica, a volume claim template holding GIANT_DB
    and GIANT_DATA_DIR, and nvidia.com/gpu 1 requested and limited;
  - every pod runs as non-root, every container without privilege
    escalation and with all capabilities dropped; the grace period exceeds
    GIANT_SHUTDOWN_GRACE;
  - the Secret holds placeholders, never a token.
containerfile:
  - two or more stages, the runtime one last; ENTRYPOINT ["giant", "serve"];
    a numeric non-root USER equal to the pods' runAsUser; EXPOSE the default
    port; a HEALTHCHECK that runs the script the build installs; GIANT_*
    ENV names are settings; a Release build with CUDA on;
  - the build stage installs every -dev package deploy/install-deps.sh
    does; the runtime stage every Debian package that owns a library the
    built giant links (readelf + dpkg -S on this Debian 12 machine), so the
    image's giant finds its libraries.
Prints one line per check group, NOTE lines for what it cannot prove, and
exits 1 naming every failure.
"""
import json
import os
import re
import shlex
import subprocess
import sys

try:
    import yaml
except ImportError:                                     # pragma: no cover
    print("SKIPPED: python3 has no yaml module (Debian package python3-yaml)")
    sys.exit(77)

FAIL = []
NOTES = []
def fail(msg):
    FAIL.append(msg)


def note(msg):
    NOTES.append(msg)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------
# The service's interface, from its sources
# ---------------------------------------------------------------------------

def int_expr(text):
    """'1L << 30' -> 1073741824 (the bounds in settings.c's table)."""
    t = re.sub(r"(\d+)[lLuU]+", r"\1", text.strip())
    if not re.fullmatch(r"[\d\s<>()+\-*]+", t):
        raise ValueError(text)
    return int(eval(t, {"__builtins__": {}}))           # digits and shifts only


def load_settings(src):
    text = read(os.path.join(src, "server", "base", "settings.c"))
    settings = {}
    for m in re.finditer(r'^\s*STR\((\w+),\s*"[^"]*",\s*"([^"]*)"', text, re.M):
        settings["GIANT_" + m.group(1).upper()] = {"type": "str", "default": m.group(2)}
    for m in re.finditer(r'^\s*INT\((\w+),\s*([^,]+),\s*([^,]+),\s*"([^"]*)"', text, re.M):
        settings["GIANT_" + m.group(1).upper()] = {
            "type": "int", "min": int_expr(m.group(2)), "max": int_expr(m.group(3)),
            "default": m.group(4)}
    if "GIANT_LISTEN" not in settings or "GIANT_DB" not in settings:
        fail("server/base/settings.c: its table was not understood (no listen or db setting found)")
    others = set()
    for folder, _, names in sorted(os.walk(os.path.join(src, "server"))):
        for name in sorted(names):
            if name.endswith(".c"):
                others |= set(re.findall(r'getenv\("(GIANT_\w+)"\)',
                                         read(os.path.join(folder, name))))
    return settings, others


def load_routes(src):
    text = read(os.path.join(src, "server", "routes", "routes.c"))
    routes = []
    for m in re.finditer(r'\{\s*"([A-Z]+)",\s*"(/[^"]*)",\s*(\w+),\s*([^}]*)\}', text):
        routes.append({"method": m.group(1), "pattern": m.group(2),
                       # the flags, before the sampler's handler column
                       "flags": {f.strip() for f in m.group(4).split(",")[0].split("|")}})
    if not any(r["pattern"] == "/healthz" for r in routes):
        fail("server/routes/routes.c: its route table was not understood (no /healthz)")
    return routes, text


def admin_paths(text):
    """The paths routes_register_admin copies to the admin listener."""
    m = re.search(r"routes_register_admin\(.*?admin\[\]\s*=\s*\{([^}]*)\}", text, re.S)
    if not m:
        fail("server/routes/routes.c: routes_register_admin's path list was not understood")
        return set()
    return set(re.findall(r'"(/[^"]*)"', m.group(1)))


def route_for(routes, method, path):
    for r in routes:
        rx = "^" + re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(r["pattern"])) + "$"
        if r["method"] == method and re.match(rx, path):
            return r
    return None


# ---------------------------------------------------------------------------
# manifests
# ---------------------------------------------------------------------------

def pod_specs(objs):
    """(workload, pod spec) for every StatefulSet and Deployment."""
    for o in objs:
        if o["kind"] in ("StatefulSet", "Deployment"):
            yield o, o["spec"]["template"]["spec"]


def containers(spec):
    return list(spec.get("initContainers", [])) + list(spec.get("containers", []))


def is_giant(c):
    return c.get("image") == "giant" or str(c.get("image", "")).startswith("giant:")


def check_manifests(src):
    kdir = os.path.join(src, "deploy", "k8s")
    settings, other_env = load_settings(src)
    routes, routes_text = load_routes(src)
    known = set(settings) | other_env | {"GIANT_CONFIG"}

    def known_var(name, where):
        if name in known:
            return True
        fail(f"{where}: {name} is not a setting of server/base/settings.c (flags --NAME are GIANT_NAME)")
        return False

    def check_value(name, value, where):
        s = settings.get(name)
        if not s or s["type"] != "int":
            return
        try:
            v = int(str(value), 10)
        except ValueError:
            fail(f"{where}: {name}='{value}' is not an integer")
            return
        if not s["min"] <= v <= s["max"]:
            fail(f"{where}: {name}={v} is outside [{s['min']}, {s['max']}]")

    # -- the files and the kustomization ---------------------------------
    kust = yaml.safe_load(read(os.path.join(kdir, "kustomization.yaml")))
    listed = list(kust.get("resources", []))
    files = sorted(f for f in os.listdir(kdir)
                   if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml")
    for f in files:
        if f not in listed:
            fail(f"deploy/k8s/{f} is not in kustomization.yaml's resources")
    for f in listed:
        if not os.path.exists(os.path.join(kdir, f)):
            fail(f"kustomization.yaml lists {f}, which does not exist")
    if kust.get("namespace") != "giant":
        fail("kustomization.yaml: namespace is not giant")
    generated = {}
    for g in kust.get("configMapGenerator", []):
        for f in g.get("files", []):
            fname = f.split("=", 1)[-1]
            if not os.path.exists(os.path.join(kdir, fname)):
                fail(f"kustomization.yaml: configMapGenerator {g['name']} names {fname}, which does not exist")
            generated.setdefault(g["name"], []).append(fname)
    if not any(i.get("name") == "giant" for i in kust.get("images", [])):
        fail("kustomization.yaml: no images entry for the giant image")

    objs = []
    for f in files:
        for d in yaml.safe_load_all(read(os.path.join(kdir, f))):
            if d:
                d["_file"] = f
                objs.append(d)
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    cms = by_kind.get("ConfigMap", {})
    secrets = by_kind.get("Secret", {})
    services = by_kind.get("Service", {})
    if "Namespace" not in by_kind:
        fail("no Namespace manifest")

    # -- settings ----------------------------------------------------------
    n_vars = 0
    for name, cm in cms.items():
        for k, v in (cm.get("data") or {}).items():
            if k.startswith("GIANT_"):
                n_vars += 1
                if known_var(k, f"ConfigMap {name}"):
                    check_value(k, v, f"ConfigMap {name}")
    common = (cms.get("giant-settings") or {}).get("data") or {}
    listen_default = settings.get("GIANT_LISTEN", {}).get("default", "127.0.0.1:8080")
    port = int(listen_default.rsplit(":", 1)[1])
    listen = common.get("GIANT_LISTEN")
    if listen is None:
        fail("ConfigMap giant-settings: no GIANT_LISTEN (the default listens on loopback only)")
    else:
        host, _, lport = listen.rpartition(":")
        if lport != str(port):
            fail(f"GIANT_LISTEN={listen}: port is not the service's default {port}")
        if host.startswith("127.") or host in ("localhost", "[::1]"):
            fail(f"GIANT_LISTEN={listen}: a loopback address is unreachable from other pods")
    admin_port = None
    admin_listen = common.get("GIANT_ADMIN_LISTEN")
    if admin_listen:
        host, _, aport = admin_listen.rpartition(":")
        if not aport.isdigit() or int(aport) == port or int(aport) == 0:
            fail(f"GIANT_ADMIN_LISTEN={admin_listen}: needs a fixed port other than the API's {port}")
        else:
            admin_port = int(aport)
        if host.startswith("127.") or host in ("localhost", "[::1]"):
            fail(f"GIANT_ADMIN_LISTEN={admin_listen}: the kubelet's probes cannot reach loopback")
    admin_only = admin_paths(routes_text) if admin_port else set()
    if common.get("GIANT_REQUIRE_TOKENS") != "1":
        fail("ConfigMap giant-settings: GIANT_REQUIRE_TOKENS must be 1 behind Services and proxies")

    # -- workloads -------------------------------------------------------------
    grace = int(common.get("GIANT_SHUTDOWN_GRACE", settings.get("GIANT_SHUTDOWN_GRACE", {}).get("default", "30")))
    n_probes = 0
    for w, spec in pod_specs(objs):
        wname = f"{w['kind']} {w['metadata']['name']}"
        labels = w["spec"]["template"]["metadata"].get("labels", {})
        sel = w["spec"]["selector"]["matchLabels"]
        if any(labels.get(k) != v for k, v in sel.items()):
            fail(f"{wname}: its selector does not match its pod labels")
        psc = spec.get("securityContext", {})
        if psc.get("runAsNonRoot") is not True or not psc.get("runAsUser"):
            fail(f"{wname}: the pod must set runAsNonRoot: true and a non-zero runAsUser")
        if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            fail(f"{wname}: seccompProfile RuntimeDefault missing")
        if int(spec.get("terminationGracePeriodSeconds", 30)) <= grace:
            fail(f"{wname}: terminationGracePeriodSeconds must exceed GIANT_SHUTDOWN_GRACE={grace}")
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        claims = {c["metadata"]["name"]: c for c in w["spec"].get("volumeClaimTemplates", [])}
        for v in vols.values():
            ref = (v.get("configMap") or {}).get("name")
            if ref and ref not in cms and ref not in generated:
                fail(f"{wname}: volume {v['name']} names ConfigMap {ref}, which is not defined")
            ref = (v.get("secret") or {}).get("secretName")
            if ref and ref not in secrets:
                fail(f"{wname}: volume {v['name']} names Secret {ref}, which is not defined")
        giant_env = {}
        for c in containers(spec):
            cname = f"{wname} container {c['name']}"
            sc = c.get("securityContext", {})
            if sc.get("allowPrivilegeEscalation") is not False:
                fail(f"{cname}: allowPrivilegeEscalation must be false")
            if "ALL" not in (sc.get("capabilities", {}).get("drop") or []):
                fail(f"{cname}: capabilities must drop ALL")
            if sc.get("runAsUser") == 0 or sc.get("runAsNonRoot") is False:
                fail(f"{cname}: runs as root")
            for m in c.get("volumeMounts", []):
                if m["name"] not in vols and m["name"] not in claims:
                    fail(f"{cname}: mounts {m['name']}, which is not a volume of the pod")
            for e in c.get("envFrom", []):
                ref = (e.get("configMapRef") or {}).get("name")
                if ref is not None:
                    if ref not in cms:
                        fail(f"{cname}: envFrom names ConfigMap {ref}, which is not defined")
                    elif is_giant(c):
                        for k, v in (cms[ref].get("data") or {}).items():
                            if not k.startswith("GIANT_"):
                                fail(f"{cname}: ConfigMap {ref} key {k} is not a GIANT_* setting")
                            giant_env[k] = v
                ref = (e.get("secretRef") or {}).get("name")
                if ref is not None and ref not in secrets:
                    fail(f"{cname}: envFrom names Secret {ref}, which is not defined")
            for e in c.get("env", []):
                if e["name"].startswith("GIANT_") and is_giant(c):
                    n_vars += 1
                    if known_var(e["name"], cname) and "value" in e:
                        check_value(e["name"], e["value"], cname)
                    giant_env[e["name"]] = e.get("value")
                vf = e.get("valueFrom") or {}
                ref = vf.get("configMapKeyRef")
                if ref and (ref["name"] not in cms or ref["key"] not in (cms[ref["name"]].get("data") or {})):
                    fail(f"{cname}: env {e['name']} names ConfigMap {ref['name']} key {ref['key']}, not defined")
                ref = vf.get("secretKeyRef")
                if ref and (ref["name"] not in secrets or
                            ref["key"] not in {**(secrets[ref['name']].get('stringData') or {}),
                                               **(secrets[ref['name']].get('data') or {})}):
                    fail(f"{cname}: env {e['name']} names Secret {ref['name']} key {ref['key']}, not defined")
            if not is_giant(c):
                continue
            if c in spec.get("initContainers", []):
                continue
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            if ports.get("http") != port:
                fail(f"{cname}: containerPort 'http' is {ports.get('http')}, the service listens on {port}")
            if admin_port and ports.get("admin") != admin_port:
                fail(f"{cname}: containerPort 'admin' is {ports.get('admin')}, GIANT_ADMIN_LISTEN's port is {admin_port}")
            probe_ports = ("admin", admin_port) if admin_port else ("http", port)
            for kind, want in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"),
                               ("startupProbe", None)):
                p = c.get(kind)
                if p is None:
                    if want:
                        fail(f"{cname}: no {kind}")
                    continue
                g = p.get("httpGet")
                if not g:
                    fail(f"{cname}: {kind} is not an httpGet probe")
                    continue
                n_probes += 1
                if want and g["path"] != want:
                    fail(f"{cname}: {kind} is {g['path']}, expected {want}")
                r = route_for(routes, "GET", g["path"])
                if r is None:
                    fail(f"{cname}: {kind} path {g['path']} is not a GET route of server/routes/routes.c")
                elif "AUTH_OPEN" not in r["flags"]:
                    fail(f"{cname}: {kind} path {g['path']} needs a token (routes.c: {' | '.join(sorted(r['flags']))}); probes send none")
                if g["port"] not in probe_ports:
                    fail(f"{cname}: {kind} port {g['port']} is not {probe_ports[0]!r} or {probe_ports[1]}")
                if admin_port and g["path"] not in admin_only:
                    fail(f"{cname}: {kind} path {g['path']} is not served on the admin listener ({', '.join(sorted(admin_only))})")
            ann = w["spec"]["template"]["metadata"].get("annotations", {})
            if ann.get("prometheus.io/port") not in (None, str(probe_ports[1])):
                fail(f"{wname}: prometheus.io/port is not {probe_ports[1]}")
            if ann.get("prometheus.io/path") not in (None, "/metrics") or \
                    route_for(routes, "GET", "/metrics") is None:
                fail(f"{wname}: prometheus.io/path is not the service's /metrics route")
        # the trainer
        if w["kind"] == "StatefulSet":
            if w["spec"].get("replicas") != 1:
                fail(f"{wname}: the trainer must have exactly one replica (one SQLite writer)")
            svc = services.get(w["spec"].get("serviceName"))
            if svc is None or svc["spec"].get("clusterIP") != "None":
                fail(f"{wname}: serviceName must name a headless Service (clusterIP: None)")
            if not claims:
                fail(f"{wname}: no volumeClaimTemplates for the database and data directory")
            main = spec["containers"][0]
            mounts = {m["mountPath"]: m["name"] for m in main.get("volumeMounts", [])}
            for var in ("GIANT_DB", "GIANT_DATA_DIR"):
                path = giant_env.get(var)
                if not path:
                    fail(f"{wname}: {var} is not set")
                    continue
                held = [mp for mp, n in mounts.items() if n in claims and
                        (path == mp or path.startswith(mp.rstrip("/") + "/"))]
                if not held:
                    fail(f"{wname}: {var}={path} is not on the persistent volume")
            res = main.get("resources", {})
            for part in ("requests", "limits"):
                if str(res.get(part, {}).get("nvidia.com/gpu")) != "1":
                    fail(f"{wname}: {part} nvidia.com/gpu is not 1")
        else:
            main = spec["containers"][0]
            res = main.get("resources", {})
            for part in ("requests", "limits"):
                if not res.get(part, {}).get("memory"):
                    fail(f"{wname}: no memory {part}")
            if not res.get("requests", {}).get("cpu"):
                fail(f"{wname}: no cpu request")
            if giant_env.get("GIANT_ROLE") != "sampler" or not giant_env.get("GIANT_MODELS"):
                fail(f"{wname}: the replicas need GIANT_ROLE=sampler and GIANT_MODELS")
            mdir = giant_env.get("GIANT_MODELS")
            for c in containers(spec):
                if not any(m["mountPath"] == mdir for m in c.get("volumeMounts", [])):
                    fail(f"{wname}: container {c['name']} does not mount the models directory {mdir}")

    # -- Services, PDB, HPA ------------------------------------------------
    pod_labels = [(w, w["spec"]["template"]["metadata"].get("labels", {})) for w, _ in pod_specs(objs)]

    def selects(sel):
        return [w for w, lab in pod_labels if sel and all(lab.get(k) == v for k, v in sel.items())]

    for name, s in services.items():
        if len(selects(s["spec"].get("selector"))) != 1:
            fail(f"Service {name}: its selector matches {len(selects(s['spec'].get('selector')))} workloads, not 1")
        for p in s["spec"]["ports"]:
            if admin_port and (p.get("targetPort") in ("admin", admin_port) or p["port"] == admin_port):
                fail(f"Service {name}: exposes the admin port {admin_port}, meant for probes and scrapes only")
            if p.get("targetPort") not in ("http", port) or p["port"] != port:
                fail(f"Service {name}: port {p['port']} -> {p.get('targetPort')}, expected {port} -> http")
    for name, p in by_kind.get("PodDisruptionBudget", {}).items():
        hit = selects(p["spec"]["selector"].get("matchLabels"))
        if len(hit) != 1 or hit[0]["kind"] != "Deployment":
            fail(f"PodDisruptionBudget {name}: does not select the sampling Deployment")
    hpa_metrics = []
    for name, h in by_kind.get("HorizontalPodAutoscaler", {}).items():
        t = h["spec"]["scaleTargetRef"]
        if t["kind"] != "Deployment" or t["name"] not in by_kind.get("Deployment", {}):
            fail(f"HorizontalPodAutoscaler {name}: targets {t['kind']} {t['name']}, not a Deployment here")
        for m in h["spec"].get("metrics", []):
            if m["type"] == "Pods":
                hpa_metrics.append(m["pods"]["metric"]["name"])
    if not hpa_metrics:
        fail("no HorizontalPodAutoscaler on a Pods metric")
    readme = read(os.path.join(src, "deploy", "README.md"))
    metrics_text = read(os.path.join(src, "server", "routes", "routes_metrics.c"))
    for metric in hpa_metrics:
        if re.search(r'"' + re.escape(metric) + r'\b', metrics_text):
            note(f"HPA metric {metric}: exported by /metrics (server/routes/routes_metrics.c)")
        else:
            note(f"HPA metric {metric}: not (yet) exported by /metrics in server/routes/routes_metrics.c;"
                 " the metrics adapter must map it (deploy/README.md)")
            if metric not in readme:
                fail(f"HPA metric {metric} is not in /metrics and deploy/README.md does not say how the adapter maps it")

    # -- the Secret --------------------------------------------------------
    for name, s in secrets.items():
        for k, v in {**(s.get("stringData") or {}), **(s.get("data") or {})}.items():
            if re.search(r"gt_[0-9A-Za-z]{8,}", str(v)) or "REPLACE" not in str(v):
                fail(f"Secret {name} key {k}: not a placeholder (REPLACE...); never commit a token")

    # -- the model-pull script's URL --------------------------------------
    for cm, fnames in generated.items():
        for fname in fnames:
            text = read(os.path.join(kdir, fname))
            for path in re.findall(r'/v1/[A-Za-z0-9_/${}]+', text):
                path = re.sub(r"\$\{?\w+\}?", "x", path)
                if route_for(routes, "GET", path) is None:
                    fail(f"deploy/k8s/{fname}: {path} is not a GET route of server/routes/routes.c")
            if "X-Checksum-SHA256" not in routes_text and \
                    "X-Checksum-SHA256" not in read(os.path.join(src, "server", "routes", "routes_models.c")):
                fail("the model-pull script checks X-Checksum-SHA256, which the service does not send")
    pull = cms.get("giant-model-pull", {}).get("data", {})
    url = pull.get("TRAINER_URL", "")
    m = re.match(r"http://([^:/]+):(\d+)/?$", url)
    if not m:
        fail(f"ConfigMap giant-model-pull: TRAINER_URL '{url}' is not http://HOST:PORT")
    else:
        host, uport = m.group(1), int(m.group(2))
        sts = by_kind.get("StatefulSet", {}).get("giant-trainer", {})
        svc = sts.get("spec", {}).get("serviceName")
        if uport != port:
            fail(f"TRAINER_URL port {uport} is not {port}")
        if host.split(".")[0] not in (svc, f"giant-trainer-0") or (host.count(".") and host.split(".")[1] != svc):
            fail(f"TRAINER_URL host {host} is not the trainer's headless Service")

    print(f"manifests: {len(objs)} objects in {len(files)} files; {n_vars} GIANT_* variables,"
          f" {n_probes} probes checked against server/base/settings.c and server/routes/routes.c; port {port}")


# ---------------------------------------------------------------------------
# Containerfile
# ---------------------------------------------------------------------------

def parse_containerfile(path):
    """[(instruction, value)] with continuation lines joined; dockerfile-parse
    when it is installed (then both must agree), a small parser otherwise."""
    own = []
    cur = ""
    for line in read(path).splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        ins, _, val = cur.partition(" ")
        own.append((ins.upper(), val.strip()))
        cur = ""
    if cur:
        fail("Containerfile: ends inside a continued line")
    try:
        from dockerfile_parse import DockerfileParser
    except ImportError:
        note("Containerfile parsed by the test's own reader (dockerfile-parse is not installed)")
        return own
    with open(path, "rb") as f:
        p = DockerfileParser(fileobj=f)
        theirs = [(i["instruction"].upper(), i["value"].strip()) for i in p.structure
                  if i["instruction"].upper() != "COMMENT"]
    if [i for i, _ in theirs] != [i for i, _ in own]:
        fail("Containerfile: dockerfile-parse and the test's reader disagree on its instructions")
    print(f"containerfile: dockerfile-parse reads {len(theirs)} instructions,"
          f" {len([i for i, _ in theirs if i == 'FROM'])} stages")
    return theirs


def check_containerfile(src, binary):
    path = os.path.join(src, "deploy", "Containerfile")
    settings, other_env = load_settings(src)
    port = int(settings["GIANT_LISTEN"]["default"].rsplit(":", 1)[1])
    ins = parse_containerfile(path)
    stages = []
    for i, v in ins:
        if i == "FROM":
            stages.append({"from": v, "ins": []})
        elif stages:
            stages[-1]["ins"].append((i, v))
        elif i != "ARG":
            fail(f"Containerfile: {i} before the first FROM")
    if len(stages) < 2:
        fail("Containerfile: not multi-stage")
        return
    names = [re.search(r"\bAS\s+(\S+)", s["from"], re.I) for s in stages]
    names = [m.group(1) if m else None for m in names]
    build, run = stages[0], stages[-1]
    final = {}
    for i, v in run["ins"]:
        final.setdefault(i, []).append(v)
    ep = final.get("ENTRYPOINT", [None])[-1]
    try:
        if json.loads(ep or "null") != ["giant", "serve"]:
            fail(f"Containerfile: ENTRYPOINT is {ep}, expected [\"giant\", \"serve\"]")
    except ValueError:
        fail(f"Containerfile: ENTRYPOINT {ep} is not the exec (JSON) form")
    user = final.get("USER", [""])[-1]
    uid = user.split(":")[0]
    if not uid.isdigit() or int(uid) == 0:
        fail(f"Containerfile: USER '{user}' is not a numeric non-root user (Kubernetes' runAsNonRoot needs a number)")
    else:
        for f in ("trainer.yaml", "sampler.yaml"):
            if f"runAsUser: {uid}" not in read(os.path.join(src, "deploy", "k8s", f)):
                fail(f"deploy/k8s/{f}: runAsUser is not the image's user {uid}")
    if str(port) not in " ".join(final.get("EXPOSE", [])).split():
        fail(f"Containerfile: does not EXPOSE {port}")
    hc = final.get("HEALTHCHECK", [""])[-1]
    m = re.search(r'CMD\s+(\[.*\])', hc)
    if not m:
        fail("Containerfile: no HEALTHCHECK CMD in exec form")
    else:
        cmd = json.loads(m.group(1))
        if "curl" in cmd[0] or "wget" in cmd[0]:
            fail("Containerfile: the HEALTHCHECK uses curl/wget, which the image does not have")
        if not re.search(r"deploy/healthcheck\.sh\s+\S*" + re.escape(cmd[0]), " ".join(v for _, v in build["ins"])):
            fail(f"Containerfile: the build does not install deploy/healthcheck.sh as {cmd[0]}")
    for i, v in run["ins"]:
        if i == "ENV":
            for k in re.findall(r"(GIANT_\w+)=", v):
                if k not in settings and k not in other_env:
                    fail(f"Containerfile: ENV {k} is not a setting of server/base/settings.c")
        if i == "COPY" and "--from=" in v and names[0] and f"--from={names[0]}" not in v:
            fail(f"Containerfile: runtime COPY {v} is not from the build stage")
    build_text = " ".join(v for i, v in build["ins"] if i == "RUN")
    for flag in ("-DCMAKE_BUILD_TYPE=Release", "-DGIANT_CUDA=ON"):
        if flag not in build_text:
            fail(f"Containerfile: the build stage does not configure with {flag}")
    if "nvcc" not in build_text:
        fail("Containerfile: the build stage installs no nvcc")
    run_text = " ".join(v for i, v in run["ins"] if i == "RUN")
    # the -dev packages of deploy/install-deps.sh: all in the build stage
    deps = read(os.path.join(src, "deploy", "install-deps.sh"))
    m = re.search(r'PKGS="([^"]*)"', deps)
    # libFuzzer's runtime builds the fuzz targets only (tests/fuzz), never giant
    test_only = {"libclang-rt-14-dev"}
    dev = [p for p in (m.group(1).split() if m else [])
           if p.endswith("-dev") and p not in test_only]
    if not dev:
        fail("deploy/install-deps.sh: its package list was not understood")
    for p in dev:
        if not re.search(r"(^|\s)" + re.escape(p) + r"(\s|$)", build_text):
            fail(f"Containerfile: the build stage lacks {p} (deploy/install-deps.sh installs it)")
    # the runtime stage: the package of every library giant links
    if binary and os.path.exists(binary) and not debian12():
        note("this machine is not Debian 12, whose package names the runtime stage uses:"
             " the runtime stage's libraries were not checked against the built giant")
    elif binary and os.path.exists(binary):
        out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True)
        needed = re.findall(r"\(NEEDED\).*\[(.+)\]", out.stdout)
        base = {"libc6", "libgcc-s1", "libstdc++6"}          # in debian:bookworm-slim
        pkgs = set()
        cuda = []
        for so in needed:
            if re.match(r"lib(cudart|cublas|cublasLt|nccl)\.so", so):
                cuda.append(so)
                continue
            if re.match(r"lib(asan|ubsan|lsan|tsan)\.so", so):
                note(f"{so}: a sanitizer build's runtime, not a library of the Release image")
                continue
            q = subprocess.run(["dpkg", "-S", "*/" + so], capture_output=True, text=True)
            owners = {ln.split(":")[0] for ln in q.stdout.splitlines() if ":" in ln}
            owners -= {o for o in owners if o.endswith("-dev")}
            if not owners:
                note(f"{so}: no Debian package owns it here; not checked")
                continue
            if owners & base:
                continue
            if not any(re.search(r"(^|\s)" + re.escape(o) + r"(\s|$)", run_text) for o in owners):
                fail(f"Containerfile: the runtime stage lacks {' or '.join(sorted(owners))} ({so}, which giant links)")
            pkgs |= owners
        for so in cuda:
            want = ("cuda-cudart-" if "cudart" in so else "libnccl2" if "nccl" in so
                    else "libcublas-")
            if want not in run_text:
                fail(f"Containerfile: the runtime stage lacks the package of {so} ({want}*)")
        print(f"containerfile: giant links {len(needed)} libraries; their {len(pkgs)} Debian"
              f" packages and {len(cuda)} CUDA libraries are in the runtime stage")
    else:
        note("no built giant given: the runtime stage's libraries were not checked against it")
    print(f"containerfile: {len(stages)} stages ({', '.join(n or '?' for n in names)}),"
          f" ENTRYPOINT giant serve, USER {user}, EXPOSE {port}, HEALTHCHECK {hc.split('CMD')[-1].strip()}")


def debian12():
    """True on Debian 12, the Containerfile's base: only there do this machine's
    package names (dpkg -S) match the image's (Ubuntu, say, renames libcurl4
    to libcurl4t64)."""
    try:
        with open("/etc/os-release") as f:
            kv = dict(ln.rstrip("\n").split("=", 1) for ln in f if "=" in ln)
    except OSError:
        return False
    return kv.get("ID") == "debian" and kv.get("VERSION_ID", "").strip('"') == "12"


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("manifests", "containerfile"):
        print(__doc__)
        return 2
    src = sys.argv[2]
    if sys.argv[1] == "manifests":
        check_manifests(src)
    else:
        check_containerfile(src, sys.argv[3] if len(sys.argv) > 3 else None)
    for n in NOTES:
        print("NOTE:", n)
    for f in FAIL:
        print("FAIL:", f)
    print(f"{sys.argv[1]}: {'FAILED, ' + str(len(FAIL)) + ' problem(s)' if FAIL else 'ok'}")
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
