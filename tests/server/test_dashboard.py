#!/usr/bin/env python3
"""test_dashboard: the dashboard (server/ui/) in a real browser.

Starts `giant serve` on a loopback port with a fresh database and
--require-tokens 1, makes two small dataset-2 datasets, trains a tiny run
and queues a second, then drives headless Chromium over the DevTools
protocol (a websocket client in the standard library below) through every
view: the token form after the first 401, the runs table, the status
filter, the submit form's 422 next to its field, cancel and resume, the
live curves of a running run and a finished one with a second overlaid, an
evaluation queued from the page and drawn (histograms, AUC table), and the
shower pictures.  Each check reads the page's content (ids, statuses,
numbers, SVG paths, canvas pixels), not just a 200.  Screenshots (PNG) go
to dashboard-screenshots/ in the working directory (the build tree).

Exit 77 (ctest: skipped) only when no Chromium is installed.
"""
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SKIP = 77
WAIT = 180          # seconds any one condition may take (a loaded 2-core machine)


def log(msg):
    print(msg, flush=True)


class Failed(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failed(msg)
    log('ok   ' + msg)


# ---------------------------------------------------------------------------
# A minimal websocket client (RFC 6455: text frames, client masking) and the
# DevTools protocol over it
# ---------------------------------------------------------------------------

class WebSocket:
    def __init__(self, url, timeout=WAIT):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        req = (f'GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n'
               f'Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n')
        self.sock.sendall(req.encode())
        head = b''
        while b'\r\n\r\n' not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise Failed('websocket: connection closed during the handshake')
            head += chunk
        head, self.buf = head.split(b'\r\n\r\n', 1)
        if b' 101 ' not in head.split(b'\r\n')[0]:
            raise Failed('websocket: handshake refused: ' + head.decode(errors='replace'))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise Failed('websocket: connection closed')
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode, payload):
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack('>H', n)
        else:
            head += bytes([0x80 | 127]) + struct.pack('>Q', n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def send(self, text):
        self._send_frame(0x1, text.encode())

    def recv(self):
        parts = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack('>H', self._read(2))[0]
            elif n == 127:
                n = struct.unpack('>Q', self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x9:                      # ping
                self._send_frame(0xA, data)
                continue
            if opcode == 0x8:
                raise Failed('websocket: closed by the browser')
            if opcode in (0x0, 0x1, 0x2):
                parts.append(data)
                if b0 & 0x80:
                    return b''.join(parts).decode()


class Browser:
    """One Chromium page driven over the DevTools protocol."""

    def __init__(self, exe, workdir, shots):
        self.shots = shots
        self.errors = []
        self.next_id = 0
        profile = os.path.join(workdir, 'chromium-profile')
        self.stderr_path = os.path.join(workdir, 'chromium.log')
        self.proc = subprocess.Popen(
            [exe, '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
             '--remote-debugging-port=0', '--user-data-dir=' + profile, '--no-first-run',
             '--no-default-browser-check', '--disable-background-networking',
             '--disable-component-update', '--disable-sync', '--disable-extensions',
             '--mute-audio', '--hide-scrollbars', '--window-size=1280,900', 'about:blank'],
            stdout=subprocess.DEVNULL, stderr=open(self.stderr_path, 'w'),
            env=dict(os.environ, HOME=workdir))
        port = None
        deadline = time.time() + WAIT
        while port is None:
            if self.proc.poll() is not None:
                raise Failed('chromium exited: ' + open(self.stderr_path).read()[-2000:])
            if time.time() > deadline:
                raise Failed('chromium did not open its DevTools port')
            m = re.search(r'DevTools listening on ws://127\.0\.0\.1:(\d+)/', open(self.stderr_path).read())
            if m:
                port = int(m.group(1))
            else:
                time.sleep(0.1)
        pages = []
        while not pages:
            with urllib.request.urlopen(f'http://127.0.0.1:{port}/json/list', timeout=WAIT) as r:
                pages = [t for t in json.load(r) if t.get('type') == 'page']
            if not pages:
                time.sleep(0.1)
        self.ws = WebSocket(pages[0]['webSocketDebuggerUrl'])
        for m in ('Page.enable', 'Runtime.enable'):
            self.call(m)
        self.metrics(900)

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({'id': mid, 'method': method, 'params': params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get('id') == mid:
                if 'error' in msg:
                    raise Failed(f'{method}: {msg["error"]}')
                return msg.get('result', {})
            if msg.get('method') == 'Runtime.exceptionThrown':
                d = msg['params']['exceptionDetails']
                text = (d.get('exception') or {}).get('description') or d.get('text')
                self.errors.append(text)
                log('page exception: ' + str(text))

    def metrics(self, height):
        self.call('Emulation.setDeviceMetricsOverride', width=1280, height=height,
                  deviceScaleFactor=1, mobile=False)

    def js(self, expr):
        if expr.lstrip().startswith(('const ', 'let ')):
            expr = '{' + expr + '}'        # a block: its names do not outlive the call
        r = self.call('Runtime.evaluate', expression=expr, returnByValue=True, awaitPromise=True)
        if 'exceptionDetails' in r:
            raise Failed(f'js {expr[:80]}: {r["exceptionDetails"]}')
        return r['result'].get('value')

    def wait(self, expr, what, timeout=WAIT):
        """Polls expr until it is truthy; returns its value."""
        deadline = time.time() + timeout
        while True:
            v = self.js(expr)
            if v:
                log('ok   ' + what)
                return v
            if time.time() > deadline:
                self.screenshot('failed')
                body = self.js('document.body ? document.body.innerText.slice(0, 3000) : ""')
                raise Failed(f'timed out ({timeout} s) waiting for: {what}\npage text:\n{body}')
            time.sleep(0.25)

    def go(self, url):
        self.call('Page.navigate', url=url)
        self.wait('document.readyState === "complete" && !!document.querySelector("#view")',
                  'loaded ' + url)

    def screenshot(self, name, selector=None, max_height=8000):
        """The whole page (at most max_height pixels), or one element's box."""
        self.js('document.querySelector("#toast")?.classList.add("hidden"); true')    # a passing notice
        h = int(self.js('Math.max(document.documentElement.scrollHeight, 600)') or 900)
        self.metrics(min(h, max_height))
        time.sleep(0.2)
        params = {'format': 'png', 'captureBeyondViewport': True}
        if selector:
            r = self.js(f'(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();'
                        ' return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()')
            params['clip'] = {'x': r[0], 'y': r[1], 'width': r[2], 'height': min(r[3], max_height), 'scale': 1}
        elif h > max_height:
            params['clip'] = {'x': 0, 'y': 0, 'width': 1280, 'height': max_height, 'scale': 1}
        r = self.call('Page.captureScreenshot', **params)
        self.metrics(900)
        path = os.path.join(self.shots, name + '.png')
        with open(path, 'wb') as f:
            f.write(base64.b64decode(r['data']))
        log(f'screenshot {path}')
        return path

    def close(self):
        try:
            self.call('Browser.close')
        except Exception:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------
# The service
# ---------------------------------------------------------------------------

class Service:
    def __init__(self, binary, workdir):
        self.db = os.path.join(workdir, 'giant.db')
        self.data = os.path.join(workdir, 'data')
        # one token for the page, one for this test's own calls (rate limits are per token)
        tokens = []
        for name in ('dashboard', 'harness'):
            out = subprocess.run([binary, 'token', 'create', '--name', name, '--role', 'admin',
                                  '--db', self.db], capture_output=True, text=True, timeout=WAIT)
            m = re.search(r'gt_[0-9a-f]+', out.stdout)
            if out.returncode != 0 or not m:
                raise Failed('giant token create: ' + out.stdout + out.stderr)
            tokens.append(m.group(0))
        self.page_token, self.token = tokens
        self.log_path = os.path.join(workdir, 'serve.log')
        self.proc = subprocess.Popen(
            [binary, 'serve', '--listen', '127.0.0.1:0', '--db', self.db, '--data-dir', self.data,
             '--default-dataset', '0', '--device', 'cpu', '--require-tokens', '1',
             '--max-json-showers', '64'],       # below the page's 100: it learns the limit
            stdout=subprocess.DEVNULL, stderr=open(self.log_path, 'w'))
        deadline = time.time() + WAIT
        while True:
            m = re.search(r'msg=listening addr=127\.0\.0\.1:(\d+)', open(self.log_path).read())
            if m:
                break
            if self.proc.poll() is not None or time.time() > deadline:
                raise Failed('giant serve did not start:\n' + open(self.log_path).read()[-3000:])
            time.sleep(0.1)
        self.url = f'http://127.0.0.1:{m.group(1)}'

    def request(self, method, path, body=None, headers=None, token=True):
        h = dict(headers or {})
        if token:
            h['Authorization'] = 'Bearer ' + self.token
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h['Content-Type'] = 'application/json'
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=WAIT) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def json(self, method, path, body=None):
        st, _, data = self.request(method, path, body)
        if st >= 300:
            raise Failed(f'{method} {path}: {st} {data[:300]!r}')
        return json.loads(data)

    def wait(self, path, cond, what, timeout=WAIT):
        deadline = time.time() + timeout
        while True:
            j = self.json('GET', path)
            if cond(j):
                log('ok   ' + what)
                return j
            if time.time() > deadline:
                raise Failed(f'timed out waiting for {what}: {json.dumps(j)[:500]}')
            time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def tiny_run(name, dataset_id, steps):
    return {
        'name': name, 'dataset_id': dataset_id,
        'model': {'stage1': {'trunk': {'hidden': 32, 'blocks': 1, 'emb_dim': 8}},
                  'stage2': {'trunk': {'hidden': 32, 'blocks': 1, 'emb_dim': 8}}},
        'train': {'device': 'cpu', 'batch': 32, 'steps': {'stage1': steps, 'stage2': steps},
                  'warmup_steps': 2, 'log_every': 2, 'val_every': 10, 'val_size': 32,
                  'ckpt_every': 10},
        'sample': {'steps': 3},
    }


# ---------------------------------------------------------------------------
# The views
# ---------------------------------------------------------------------------

def q(sel):
    return json.dumps(sel)


def run_checks(svc, br, shots):
    # --- the files themselves -------------------------------------------------
    st, h, body = svc.request('GET', '/', token=False)
    check(st == 200 and h.get('Content-Type', '').startswith('text/html') and b'/ui/app.js' in body,
          'GET / without a token: 200 text/html naming /ui/app.js')
    check(h.get('Cache-Control') == 'no-cache' and re.fullmatch(r'"[0-9a-f]{16}"', h.get('ETag', '')),
          'GET /: Cache-Control no-cache and an ETag')
    st2, _, body2 = svc.request('GET', '/', headers={'If-None-Match': h['ETag']}, token=False)
    check(st2 == 304 and body2 == b'', 'GET / with If-None-Match: 304, no body')
    for name, ctype in (('app.js', 'text/javascript'), ('style.css', 'text/css')):
        st, hh, _ = svc.request('GET', '/ui/' + name, token=False)
        check(st == 200 and hh.get('Content-Type', '').startswith(ctype), f'/ui/{name}: {ctype}')
    st, _, _ = svc.request('GET', '/ui/missing.js', token=False)
    check(st == 404, '/ui/missing.js: 404')
    st, _, _ = svc.request('GET', '/v1/runs', token=False)
    check(st == 401, 'the API itself still needs the token (401)')

    # --- data: two references, a tiny run that succeeds, a long one queued ----
    for name, seed in (('reference', 1), ('reference-2', 2)):
        svc.json('POST', '/v1/datasets', {'name': name, 'synthetic': {'geometry': 'dataset_2', 'n': 300, 'seed': seed}})
    for i in (1, 2):
        svc.wait(f'/v1/datasets/{i}', lambda j: j['status'] == 'ready', f'dataset {i} ready')
    r1 = svc.json('POST', '/v1/runs', tiny_run('tiny', 1, 40))['id']
    r2 = svc.json('POST', '/v1/runs', tiny_run('long', 1, 20000))['id']
    run1 = svc.wait(f'/v1/runs/{r1}', lambda j: j['status'] in ('succeeded', 'failed'), f'run {r1} finished')
    check(run1['status'] == 'succeeded', f'run {r1} succeeded')

    # --- runs view: the 401 asks for the token ----------------------------------
    br.go(svc.url + '/#/runs')
    br.wait(f'!document.querySelector("#token-dialog").classList.contains("hidden")',
            'the first API call got 401: the token form is shown')
    br.screenshot('01-token')
    # a wrong token is refused and asked for again
    br.js('document.querySelector("#token-input").value = "gt_0123456789abcdef";'
          'document.querySelector("#token-submit").click(); true')
    br.wait('!document.querySelector("#token-dialog").classList.contains("hidden") && '
            '/refused/.test(document.querySelector("#token-reason").innerText)',
            'a wrong token: 401 again, the form says it was refused')
    br.js(f'document.querySelector("#token-input").value = {q(svc.page_token)};'
          'document.querySelector("#token-submit").click(); true')
    br.wait(f'document.querySelector("#token-dialog").classList.contains("hidden") && '
            f'sessionStorage.getItem("giant.token") === {q(svc.page_token)}', 'the token is kept in sessionStorage')
    row1 = f'#runs-table tr[data-run="{r1}"]'
    br.wait(f'document.querySelector({q(row1)})?.dataset.status === "succeeded"', f'run {r1} succeeded in the table')
    cells = br.js(f'Array.from(document.querySelectorAll({q(row1 + " td")})).map(td => td.innerText)')
    check(cells[0] == str(r1) and cells[1] == 'tiny' and 'succeeded' in cells[2] and cells[3] == 'cpu'
          and cells[4] == 'fp32', f'run {r1} row: id, name, status, device, precision ({cells[:5]})')
    check('80/80' in cells[5] and '100%' in cells[5], f'run {r1} progress 80/80 (100%) ({cells[5]})')
    want = [run1['best'][s]['val_loss'] for s in ('energy', 'shower')]
    got = [float(c) for c in cells[6:8]]
    check(all(abs(a - b) <= 1e-4 * max(1, abs(b)) for a, b in zip(got, want)),
          f'best validation loss per stage {got} equals the API\'s {want}')
    br.wait(f'!!document.querySelector(\'#runs-table tr[data-run="{r2}"]\')', f'run {r2} in the table')
    # the status filter
    br.js('const s = document.querySelector("#status-filter"); s.value = "succeeded";'
          's.dispatchEvent(new Event("change")); true')
    br.wait(f'location.hash === "#/runs?status=succeeded" && '
            f'Array.from(document.querySelectorAll("#runs-table tbody tr")).map(r => r.dataset.run).join() === "{r1}"',
            'status filter succeeded: only the succeeded run')
    br.go(svc.url + '/#/runs')
    br.wait(f'document.querySelectorAll("#runs-table tbody tr").length === 2', 'both runs listed again')
    # the submit form: the prefilled config (on the newest dataset-2 dataset) is queued as
    # it is, and the page goes to the new run; cancelled at once (it waits behind run 2)
    br.wait('/"dataset_id": 2/.test(document.querySelector("#config")?.value || "")',
            'the config form is prefilled with the newest dataset')
    br.js('document.querySelector("#submit-run").click(); true')
    r3 = int(br.wait('(() => { const m = /^#\\/runs\\/(\\d+)$/.exec(location.hash); return m ? m[1] : ""; })()',
                     'the submitted config is queued and the page shows its run'))
    run3 = svc.json('POST', f'/v1/runs/{r3}/cancel')
    check(run3['name'] == 'dashboard-small' and run3['status'] in ('cancelled', 'running'),
          f'run {r3} is the prefilled config ({run3["name"]}, {run3["status"]})')
    svc.wait(f'/v1/runs/{r3}', lambda j: j['status'] == 'cancelled', f'run {r3} cancelled')
    br.go(svc.url + '/#/runs')
    br.wait(f'document.querySelectorAll("#runs-table tbody tr").length === 3', 'three runs listed')
    # the submit form: a 422 shown next to the field it names
    br.js('document.querySelector("#config").value = \'{"name": "bad", "train": {"lr": 7}}\';'
          'document.querySelector("#submit-run").click(); true')
    br.wait('document.querySelector("#submit-error")?.dataset.field === "train.lr" && '
            '/out of range/.test(document.querySelector("#submit-error").innerText) && '
            '/422/.test(document.querySelector("#submit-error").innerText)',
            'submit form: the 422 names train.lr beside the config')
    sel = br.js('(() => { const t = document.querySelector("#config");'
                ' return t.value.slice(t.selectionStart, t.selectionEnd); })()')
    check(sel == '"lr"', f'the key "lr" is selected in the config ({sel!r})')
    # cancel, then resume, from the table
    br.wait(f'!!document.querySelector(\'button.cancel[data-run="{r2}"]\')', f'run {r2} has a cancel button')
    br.screenshot('02-runs')
    br.js(f'document.querySelector(\'button.cancel[data-run="{r2}"]\').click(); true')
    svc.wait(f'/v1/runs/{r2}', lambda j: j['status'] == 'cancelled', f'run {r2} cancelled by the button')
    br.wait(f'document.querySelector(\'#runs-table tr[data-run="{r2}"]\')?.dataset.status === "cancelled" && '
            f'!!document.querySelector(\'button.resume[data-run="{r2}"]\')', f'run {r2} shows cancelled and a resume button')
    br.js(f'document.querySelector(\'button.resume[data-run="{r2}"]\').click(); true')
    svc.wait(f'/v1/runs/{r2}', lambda j: j['status'] == 'running' and j['progress']['done_steps'] > 0,
             f'run {r2} resumed by the button and training')

    # --- one run, live: history, then the event stream --------------------------
    br.go(svc.url + f'/#/runs/{r2}')
    br.wait('/^live: \\w+ step \\d+ \\(event \\d+\\)$/.test(document.querySelector("#live")?.innerText || "")',
            f'run {r2}: metric events arrive over the stream')
    n0 = br.wait('(() => { const p = document.querySelector("#chart-loss path.line.stage-energy");'
                 ' return p ? +p.dataset.points : 0; })()', 'loss curve drawn')
    br.wait(f'(() => {{ const p = document.querySelector("#chart-loss path.line.stage-energy");'
            f' return p && +p.dataset.points > {n0}; }})()', 'the loss curve grows live')
    for c in ('grad_norm', 'lr'):
        br.wait(f'!!document.querySelector("#chart-{c} path.line")', f'{c} curve drawn')
    br.screenshot('03-run-live')
    svc.json('POST', f'/v1/runs/{r2}/cancel')
    br.wait('document.querySelector("#live")?.innerText === "finished" && '
            '!!document.querySelector(\'#run-summary [data-status="cancelled"]\')',
            f'run {r2}: the stream ended with the run, the summary says cancelled')

    # a finished run with the other overlaid
    br.go(svc.url + f'/#/runs/{r1}?compare={r2}')
    counts = br.wait('(() => { const n = s => document.querySelectorAll(s).length;'
                     ' const r = {loss: n("#chart-loss path.line"), cmp: n("#chart-loss path.line.compare"),'
                     ' val: n("#chart-val_loss circle.marker:not(.compare)"), lr: n("#chart-lr path.line"),'
                     ' gn: n("#chart-grad_norm path.line")};'
                     ' return r.loss >= 3 && r.val >= 8 ? r : null; })()',
                     f'run {r1} curves with run {r2} overlaid')
    hist = svc.json('GET', f'/v1/runs/{r1}/metrics?name=val_loss')
    nval = sum(len(s['points']) for s in hist['series'])
    check(counts['val'] == nval, f'validation markers = the history\'s points ({counts["val"]} = {nval})')
    check(counts['cmp'] >= 1 and counts['lr'] >= 2 and counts['gn'] >= 2, f'overlay and curves per stage ({counts})')
    summary = br.js('document.querySelector("#run-summary").innerText')
    check('succeeded' in summary and 'cpu / fp32' in summary, 'run summary: status, device, precision')
    br.screenshot('04-run-compare')

    # --- evaluations: queue from the page, progress, histograms, AUCs -------------
    br.go(svc.url + f'/#/runs/{r1}/evaluations')
    br.wait('!!document.querySelector("#eval-form #eval-go:not([disabled])")', 'evaluation form ready')
    br.js('const f = document.querySelector("#eval-form");'
          'f.querySelector("#eval-n").value = "5"; f.querySelector("#eval-go").click(); true')
    br.wait('document.querySelector("#eval-error")?.dataset.field === "n"', 'evaluation form: 422 names n')
    br.js('const f = document.querySelector("#eval-form");'
          'f.querySelector("#eval-dataset").value = "1"; f.querySelector("#eval-ref2").value = "2";'
          'f.querySelector("#eval-n").value = "100"; f.querySelector("#eval-seed").value = "3";'
          'f.querySelector("#eval-epochs").value = "3"; f.querySelector("#eval-hidden").value = "16";'
          'f.querySelector("#eval-repeats").value = "2"; f.querySelector("#eval-go").click(); true')
    br.wait('!!document.querySelector("#evaluations-table tr[data-evaluation]")', 'the evaluation is listed')
    ev = svc.wait(f'/v1/runs/{r1}/evaluations', lambda j: j['items'] and j['items'][0]['status'] in ('succeeded', 'failed'),
                  'the evaluation finished')['items'][0]
    check(ev['status'] == 'succeeded' and ev['request']['n'] == 100 and ev['request']['ref2_dataset_id'] == 2
          and ev['request']['classifier']['repeats'] == 2,
          f'evaluation {ev["id"]} succeeded with the form\'s request')
    res = svc.json('GET', f'/v1/runs/{r1}/evaluations/{ev["id"]}')['result']
    br.wait(f'document.querySelector("#evaluation-detail")?.dataset.evaluation === "{ev["id"]}" && '
            f'document.querySelector(\'#evaluations-table tr[data-evaluation="{ev["id"]}"]\')?.dataset.status === "succeeded"',
            'the page followed it to succeeded and drew it')
    aucs = br.js('Array.from(document.querySelectorAll("#auc-table tr[data-classifier] td.auc")).map(t => t.innerText)')
    want = [res['classifier'][k]['auc'] for k in ('high', 'low')]
    check(len(aucs) == 2 and all(abs(float(a) - w) < 1e-3 for a, w in zip(aucs, want)),
          f'AUC table {aucs} = the result\'s {want}')
    sds = br.js('Array.from(document.querySelectorAll("#auc-table tr[data-classifier] td.auc-sd")).map(t => t.innerText)')
    want_sd = ['%.4f (2)' % res['classifier'][k]['auc_sd'] for k in ('high', 'low')]
    check(len(sds) == 2 and all(abs(float(a.split()[0]) - res['classifier'][k]['auc_sd']) < 1e-3 and a.endswith('(2)')
                                for a, k in zip(sds, ('high', 'low'))),
          f'AUC table sd column {sds} = the result\'s {want_sd}')
    floor = br.js('document.querySelectorAll("#auc-table tr[data-classifier] td").length')
    check(floor == 14, 'AUC table with the sd and floor columns')
    nh = len(res['histograms'])
    figs = br.js('document.querySelectorAll("#histograms figure[data-feature]").length')
    paths = br.js('document.querySelectorAll("#histograms svg.hist path.hist-gen").length')
    refs = br.js('document.querySelectorAll("#histograms svg.hist path.hist-ref").length')
    check(figs == nh and paths == nh and refs == nh, f'a histogram per feature, generated over reference ({figs}/{nh})')
    groups = br.js('Array.from(document.querySelectorAll("#histograms details")).map(d => d.dataset.group)')
    check(set(groups) == set(res['groups']) | {'Etot/Einc', 'Etot'} or set(res['groups']) <= set(groups),
          f'every feature group drawn ({len(groups)})')
    note = br.js('document.querySelector(\'#histograms figure[data-feature="E_layer_0"] text.note\')?.textContent')
    sp = res['separation_power']['E_layer_0']
    check(note is not None and note.startswith('S ') and (sp is None or abs(float(note[2:]) - sp) <= 0.01 + 0.01 * sp),
          f'separation power written on each ({note!r}, result {sp})')
    gtext = br.js('document.querySelector(\'#groups-table tr[data-group="E_layer"]\').innerText')
    check(f'{res["groups"]["E_layer"]["count"]}' in gtext, 'separation power table per group')
    br.screenshot('05-evaluation', max_height=1100)
    br.screenshot('06-evaluation-histograms', selector='#histograms', max_height=2400)

    # --- showers: a sample in JSON drawn -----------------------------------------
    br.go(svc.url + f'/#/runs/{r1}/showers')
    br.wait('document.querySelector("#showers-out")?.dataset.showers === "300"', '300 showers fetched and drawn',
            timeout=WAIT * 2)
    pics = br.js('["#mean-shower", "#single-shower"].map(s => Array.from(document.querySelectorAll(s + " canvas.wedges"))'
                 '.map(c => +c.dataset.nonzero))')
    one = svc.json('POST', f'/v1/runs/{r1}/samples', {'energies': [50000], 'seed': 1, 'row0': 299})
    want = sum(one['showers'][0])
    br.js('const i = document.querySelector("#shower-index"); i.value = "299";'
          'i.dispatchEvent(new Event("input")); true')
    text = br.wait('(() => { const t = document.querySelector("#single-box p")?.innerText || "";'
                   ' return t.startsWith("shower 299:") ? t : ""; })()', 'shower 299 picked')
    got = float(re.search(r'E_tot ([0-9.e+-]+) MeV', text).group(1))
    check(abs(got - want) <= 1e-4 * want, f'shower 299 of seed 1 is the API\'s row 299 (E_tot {got} = {want:.6g})')
    check(all(len(p) == 9 for p in pics) and sum(pics[0]) > 0 and sum(pics[1]) > 0,
          f'mean and single shower: 9 layer groups each, voxels drawn ({pics})')
    # the pictures have colour in them (not blank canvases)
    coloured = br.js('(() => { const c = document.querySelector("#mean-shower canvas.wedges");'
                     ' const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data; let n = 0;'
                     ' for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - d[i + 1]) > 30 || Math.abs(d[i + 1] - d[i + 2]) > 30) n++;'
                     ' return n; })()')
    check(coloured > 1000, f'mean shower picture is coloured ({coloured} pixels)')
    prof = br.js('["gen", "ref", "evalgen"].map(k => document.querySelectorAll("#profile path.profile-" + k).length)')
    check(prof == [1, 1, 1], 'longitudinal profile: this sample, the reference, the evaluation\'s sample')
    hs = br.js('["gen", "ref"].map(k => document.querySelectorAll(\'svg.hist[data-feature="Etot/Einc"] path.hist-\' + k).length)')
    check(hs == [1, 1], 'E_tot/E_inc histogram beside the reference')
    br.screenshot('07-showers')

    check(not br.errors, f'no uncaught exception in the page ({br.errors})')


def main():
    exe = next((shutil.which(n) for n in ('chromium', 'chromium-browser', 'google-chrome')
                if shutil.which(n)), None)
    if not exe:
        print('SKIP: no chromium installed (apt-get install chromium): the browser test cannot run')
        return SKIP
    bindir = os.environ.get('GIANT_BINARY_DIR', '.')
    binary = os.path.join(bindir, 'giant')
    if not os.access(binary, os.X_OK):
        print(f'FAIL: no giant binary at {binary}')
        return 1
    workdir = tempfile.mkdtemp(prefix='dashboard-', dir=os.getcwd())
    shots = os.path.join(os.getcwd(), 'dashboard-screenshots')
    os.makedirs(shots, exist_ok=True)
    for f in os.listdir(shots):
        if f.endswith('.png'):
            os.remove(os.path.join(shots, f))
    svc = br = None
    rc = 1
    try:
        svc = Service(binary, workdir)
        log(f'service at {svc.url}, chromium {exe}')
        br = Browser(exe, workdir, shots)
        run_checks(svc, br, shots)
        rc = 0
    except Failed as e:
        log('FAIL ' + str(e))
    finally:
        if br:
            br.close()
        if svc:
            code = svc.stop()
            if code != 0:
                log(f'FAIL giant serve exited with {code}')
                rc = 1
            if rc:
                log('--- serve.log (tail) ---\n' + open(svc.log_path).read()[-4000:])
    if rc == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    log('screenshots: ' + ' '.join(sorted(os.path.join(shots, f) for f in os.listdir(shots))))
    return rc


if __name__ == '__main__':
    sys.exit(main())
