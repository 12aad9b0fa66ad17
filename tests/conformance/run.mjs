#!/usr/bin/env node
// Conformance runner: the official MCP conformance suite
// (`@modelcontextprotocol/conformance`) against the fixture upstream directly
// and against Junction fronting it through one unprefixed mount.
//
//   tests/conformance/run.sh            (runs this file with the Node 22 in .cache/node22)
//
// Runs, in order:
//   direct         stable suite 0.1.x, `active` scenarios -> fixture
//   gateway        the same -> Junction (`[mounts.fixture] url = fixture, namespace = ""`)
//   alpha-direct   0.2.0-alpha `--requirements 2025-11-25` -> fixture
//   alpha-gateway  the same -> Junction
// plus a runner-made probe, `origin-validation` (valid Host, foreign Origin
// -> 403; loopback Origin -> 2xx), against both targets.
//
// Verdict (exit 1 on any of these):
//   - a failing scenario (a FAILURE or WARNING check, or no result) that
//     tests/conformance/baseline.yml does not list for that run, with a reason;
//   - a baseline entry whose scenario now passes (stale) or was not run;
//   - on the gateway: `dns-rebinding-protection` (stable) or
//     `server-session-lifecycle` (alpha) not passing; these cannot be baselined;
//   - a suite process that timed out, or exited non-zero while every scenario
//     of its run was passing or accepted.
// A scenario the fixture passes and the gateway fails is reported as a
// REGRESSION unless the gateway's section of the baseline accepts it.
//
// Environment:
//   JUNCTION_BIN          gateway binary (default target/debug/junction)
//   CONFORMANCE_OUT       artifacts directory, emptied first (default .cache/conformance-out)
//   CONFORMANCE_BASELINE  baseline file (default tests/conformance/baseline.yml)
//
// Binds and talks to 127.0.0.1 only. Every wait is bounded; every process
// started here is stopped by pid on exit, error or signal.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const CACHE = path.join(ROOT, '.cache');
const STABLE_PREFIX = path.join(CACHE, 'conformance-0.1');
const ALPHA_PREFIX = path.join(CACHE, 'conformance-alpha');
const FIXTURE_MODULES = path.join(CACHE, 'conformance-fixture', 'node_modules');
const FIXTURE_ENTRY = path.join(HERE, 'fixture', 'server.cjs');
const JUNCTION_BIN = process.env.JUNCTION_BIN || path.join(ROOT, 'target', 'debug', 'junction');
const OUT = path.resolve(process.env.CONFORMANCE_OUT || path.join(CACHE, 'conformance-out'));
const BASELINE = path.resolve(process.env.CONFORMANCE_BASELINE || path.join(HERE, 'baseline.yml'));

const RUNS = ['direct', 'gateway', 'alpha-direct', 'alpha-gateway'];
// Scenarios the gateway must pass whatever the fixture does; never baselined.
const REQUIRED_ON_GATEWAY = {
    gateway: ['dns-rebinding-protection', 'origin-validation'],
    'alpha-gateway': ['server-session-lifecycle'],
};
const ORIGIN_PROBE = 'origin-validation';

const STARTUP_TIMEOUT_MS = 30_000; // until a "listening on" line
const READY_TIMEOUT_MS = 60_000; // until /readyz is 200
const STABLE_SUITE_TIMEOUT_MS = 300_000; // one whole stable run (the CLI has no per-scenario timeout)
const ALPHA_SCENARIO_TIMEOUT_MS = 30_000; // alpha's own --timeout, per scenario
const ALPHA_SUITE_TIMEOUT_MS = 400_000; // one whole alpha run
const STOP_GRACE_MS = 10_000; // SIGTERM -> SIGKILL
const HTTP_TIMEOUT_MS = 10_000;

// Nothing here goes through a proxy.
const CHILD_ENV = {
    ...process.env,
    NO_PROXY: '127.0.0.1,localhost',
    no_proxy: '127.0.0.1,localhost',
    NO_COLOR: '1',
    FORCE_COLOR: '0',
};

const log = (msg) => process.stderr.write(`[conformance] ${msg}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

class Fatal extends Error {}

// ---------------------------------------------------------------- processes

const live = new Set(); // Proc

class Proc {
    constructor(name, command, args, { env = CHILD_ENV, cwd = OUT, logFile }) {
        this.name = name;
        this.lines = [];
        this.sink = fs.createWriteStream(logFile);
        this.child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
        this.pid = this.child.pid;
        this.exited = new Promise((resolve) => {
            this.child.on('exit', (code, signal) => {
                this.code = code;
                this.signal = signal;
                live.delete(this);
                resolve();
            });
            this.child.on('error', (err) => {
                this.code = -1;
                this.lines.push(`spawn error: ${err.message}`);
                live.delete(this);
                resolve();
            });
        });
        this.closed = Promise.all(
            [this.child.stdout, this.child.stderr].map(
                (stream) => new Promise((resolve) => stream.on('close', resolve)),
            ),
        ).then(() => new Promise((resolve) => this.sink.end(resolve)));
        this.waiters = [];
        let pending = { stdout: '', stderr: '' };
        for (const key of ['stdout', 'stderr']) {
            this.child[key].on('data', (chunk) => {
                this.sink.write(chunk);
                pending[key] += chunk.toString('utf8');
                const parts = pending[key].split('\n');
                pending[key] = parts.pop();
                for (const line of parts) this.onLine(line.replace(/\x1b\[[0-9;]*m/g, ''));
            });
        }
        live.add(this);
    }
    get running() {
        return this.code === undefined;
    }
    onLine(line) {
        this.lines.push(line);
        for (const w of [...this.waiters]) {
            const m = w.re.exec(line);
            if (m) {
                this.waiters.splice(this.waiters.indexOf(w), 1);
                w.resolve(m);
            }
        }
    }
    // Resolves with the first match of `re` on an output line; rejects on exit or timeout.
    async waitForLine(re, timeoutMs) {
        for (const line of this.lines) {
            const m = re.exec(line);
            if (m) return m;
        }
        let timer;
        const waiter = { re };
        const matched = new Promise((resolve) => (waiter.resolve = resolve));
        this.waiters.push(waiter);
        try {
            return await Promise.race([
                matched,
                this.exited.then(() => {
                    throw new Fatal(`${this.name} (pid ${this.pid}) exited with ${this.code ?? this.signal} before printing ${re}; log:\n${this.tail()}`);
                }),
                new Promise((_, reject) => {
                    timer = setTimeout(
                        () => reject(new Fatal(`${this.name} (pid ${this.pid}) printed no ${re} within ${timeoutMs} ms; log:\n${this.tail()}`)),
                        timeoutMs,
                    );
                }),
            ]);
        } finally {
            clearTimeout(timer);
            const i = this.waiters.indexOf(waiter);
            if (i >= 0) this.waiters.splice(i, 1);
        }
    }
    // Waits for exit up to timeoutMs; true if it exited.
    async wait(timeoutMs) {
        let timer;
        const done = await Promise.race([
            this.exited.then(() => true),
            new Promise((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
        ]);
        clearTimeout(timer);
        return done;
    }
    // SIGTERM by pid, SIGKILL after the grace period. Returns a problem string or null.
    async stop(graceMs = STOP_GRACE_MS) {
        let problem = null;
        if (this.running) {
            this.kill('SIGTERM');
            if (!(await this.wait(graceMs))) {
                problem = `${this.name} (pid ${this.pid}) ignored SIGTERM for ${graceMs} ms; sent SIGKILL`;
                this.kill('SIGKILL');
                await this.wait(graceMs);
            }
        }
        await Promise.race([this.closed, sleep(2000)]);
        return problem;
    }
    kill(signal) {
        try {
            process.kill(this.pid, signal);
        } catch {
            // already gone
        }
    }
    tail(n = 40) {
        return this.lines.slice(-n).join('\n');
    }
}

function killAllNow() {
    for (const p of live) p.kill('SIGKILL');
}
process.on('exit', killAllNow);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(sig, async () => {
        log(`${sig}: stopping ${[...live].map((p) => `${p.name} pid ${p.pid}`).join(', ') || 'nothing'}`);
        await Promise.all([...live].map((p) => p.stop(3000)));
        process.exit(sig === 'SIGINT' ? 130 : 143);
    });
}

// ----------------------------------------------------------------- baseline

function requireFrom(prefix) {
    return createRequire(path.join(prefix, 'package.json'));
}

function loadBaseline() {
    const YAML = requireFrom(STABLE_PREFIX)('yaml');
    const doc = YAML.parse(fs.readFileSync(BASELINE, 'utf8')) ?? {};
    const problems = [];
    if (typeof doc !== 'object' || Array.isArray(doc)) throw new Fatal(`${BASELINE}: expected a mapping of run -> {scenario: reason}`);
    const baseline = { checks: {} };
    for (const run of RUNS) {
        baseline[run] = new Map();
        baseline.checks[run] = new Map();
    }
    // `checks`: run -> {"scenario/check-id": reason}, a check that succeeds
    // against the fixture and not through the gateway, in a scenario both
    // pass (a SUCCESS the gateway turns into INFO, say).
    const checkEntries = doc.checks ?? {};
    delete doc.checks;
    if (typeof checkEntries !== 'object' || Array.isArray(checkEntries)) {
        problems.push('checks: expected a mapping of run -> {"scenario/check-id": reason}');
    } else {
        for (const [run, entries] of Object.entries(checkEntries)) {
            if (!RUNS.includes(run)) {
                problems.push(`checks: unknown run "${run}" (known: ${RUNS.join(', ')})`);
                continue;
            }
            for (const [key, value] of Object.entries(entries ?? {})) {
                // A reason, or { reason, sometimes: true } for a difference
                // that depends on timing (a quick answer is JSON only when
                // the upstream answers within 20 ms): not stale when absent.
                const entry = typeof value === 'object' && value !== null && !Array.isArray(value)
                    ? { reason: value.reason, sometimes: value.sometimes === true }
                    : { reason: value, sometimes: false };
                if (typeof entry.reason !== 'string' || entry.reason.trim() === '') {
                    problems.push(`checks.${run}.${key}: needs a reason (a non-empty string)`);
                } else if (!key.includes('/')) {
                    problems.push(`checks.${run}.${key}: expected "scenario/check-id"`);
                } else {
                    baseline.checks[run].set(key, { reason: entry.reason.trim(), sometimes: entry.sometimes });
                }
            }
        }
    }
    for (const [run, entries] of Object.entries(doc)) {
        if (!RUNS.includes(run)) {
            problems.push(`unknown run "${run}" (known: ${RUNS.join(', ')})`);
            continue;
        }
        if (entries == null) continue;
        if (typeof entries !== 'object' || Array.isArray(entries)) {
            problems.push(`${run}: expected a mapping scenario -> reason`);
            continue;
        }
        for (const [scenario, reason] of Object.entries(entries)) {
            if (typeof reason !== 'string' || reason.trim() === '') {
                problems.push(`${run}.${scenario}: needs a reason (a non-empty string)`);
            } else if ((REQUIRED_ON_GATEWAY[run] ?? []).includes(scenario)) {
                problems.push(`${run}.${scenario}: the gateway must pass this scenario; it cannot be baselined`);
            } else {
                baseline[run].set(scenario, reason.trim());
            }
        }
    }
    if (problems.length) throw new Fatal(`${path.relative(ROOT, BASELINE)}:\n  ${problems.join('\n  ')}`);
    return baseline;
}

// The suite's own --expected-failures file (a plain list of names) for one run.
function writeSuiteExpectedFailures(run, baseline) {
    const file = path.join(OUT, `${run}.expected-failures.yml`);
    const names = [...baseline[run].keys()].filter((s) => s !== ORIGIN_PROBE);
    fs.writeFileSync(
        file,
        `# generated from ${path.relative(ROOT, BASELINE)} (${run}); reasons live there\nserver:${names.length ? '' : ' []'}\n` +
            names.map((n) => `  - ${JSON.stringify(n)}\n`).join(''),
    );
    return file;
}

// -------------------------------------------------------------------- suite

function suiteEntry(prefix) {
    const pkgDir = path.join(prefix, 'node_modules', '@modelcontextprotocol', 'conformance');
    const pkgJson = path.join(pkgDir, 'package.json');
    if (!fs.existsSync(pkgJson)) throw new Fatal(`${pkgJson} missing: run scripts/install-test-deps.sh`);
    const pkg = JSON.parse(fs.readFileSync(pkgJson, 'utf8'));
    const bin = typeof pkg.bin === 'string' ? pkg.bin : pkg.bin.conformance;
    return { entry: path.join(pkgDir, bin), version: pkg.version };
}

// Runs one suite invocation; returns the ordered scenarios with their checks.
async function runSuite(run, suite, url, extraArgs, timeoutMs, baseline) {
    const outDir = path.join(OUT, run);
    fs.mkdirSync(outDir, { recursive: true });
    const args = [
        suite.entry,
        'server',
        '--url',
        url,
        '-o',
        outDir,
        '--expected-failures',
        writeSuiteExpectedFailures(run, baseline),
        ...extraArgs,
    ];
    log(`${run}: conformance ${suite.version} server --url ${url} ${extraArgs.join(' ')}`);
    const started = Date.now();
    const proc = new Proc(`conformance (${run})`, process.execPath, args, { logFile: path.join(OUT, `${run}.log`) });
    const finished = await proc.wait(timeoutMs);
    let timedOut = false;
    if (!finished) {
        timedOut = true;
        log(`${run}: suite still running after ${timeoutMs} ms; stopping pid ${proc.pid}`);
    }
    await proc.stop(3000);

    // "=== Running scenario: X ===" ... "Results saved to DIR"
    const order = [];
    const dirs = new Map();
    let current = null;
    for (const line of proc.lines) {
        let m = /^=== Running scenario: (\S+) ===$/.exec(line.trim());
        if (m) {
            current = m[1];
            if (!order.includes(current)) order.push(current);
            continue;
        }
        m = /^Results saved to (.+)$/.exec(line.trim());
        if (m && current) dirs.set(current, m[1].trim());
    }
    const scenarios = new Map();
    for (const name of order) {
        const dir = dirs.get(name);
        let checks = null;
        let error = null;
        if (dir && fs.existsSync(path.join(dir, 'checks.json'))) {
            try {
                checks = JSON.parse(fs.readFileSync(path.join(dir, 'checks.json'), 'utf8'));
            } catch (e) {
                error = `unreadable checks.json: ${e.message}`;
            }
        } else {
            error = timedOut ? 'no result: the suite timed out' : 'no result: the scenario crashed (see the run log)';
        }
        scenarios.set(name, { checks, error, dir });
    }
    const secs = ((Date.now() - started) / 1000).toFixed(1);
    log(`${run}: ${order.length} scenarios in ${secs} s, suite exit ${timedOut ? 'timeout' : proc.code ?? proc.signal}`);
    return { run, scenarios, exitCode: proc.code, timedOut, log: path.join(OUT, `${run}.log`) };
}

// ------------------------------------------------------------- origin probe

async function httpRequest(url, { method = 'GET', headers = {}, body } = {}) {
    const res = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(HTTP_TIMEOUT_MS) });
    let text = '';
    try {
        // An SSE answer stays open; the first chunk is enough here.
        const reader = res.body?.getReader();
        if (reader) {
            const { value } = await reader.read();
            text = value ? Buffer.from(value).toString('utf8') : '';
            await reader.cancel().catch(() => {});
        }
    } catch {
        // body not needed
    }
    return { status: res.status, headers: res.headers, text };
}

// Streamable HTTP: "If the Origin header is present and invalid, servers MUST
// respond with HTTP 403 Forbidden." The suite's dns-rebinding-protection
// scenario changes Host and Origin together; this probe keeps a valid Host.
async function originProbe(url) {
    const origin = new URL(url).origin;
    const init = JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'junction-origin-probe', version: '1.0.0' } },
    });
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
    const checks = [];
    const check = (id, description, ok, errorMessage, details) =>
        checks.push({ id, name: id, description, status: ok ? 'SUCCESS' : 'FAILURE', timestamp: new Date().toISOString(), errorMessage: ok ? undefined : errorMessage, details });

    for (const [id, bad] of [
        ['origin-foreign-rejected', 'http://evil.example.com'],
        ['origin-foreign-port-host-rejected', 'http://evil.example.com:80'],
    ]) {
        try {
            const r = await httpRequest(url, { method: 'POST', headers: { ...headers, Origin: bad }, body: init });
            check(id, `POST initialize with a loopback Host and Origin ${bad} is answered 403`, r.status === 403, `expected 403, got ${r.status}`, { origin: bad, status: r.status, body: r.text.slice(0, 300) });
            const sid = r.headers.get('mcp-session-id');
            if (sid) await httpRequest(url, { method: 'DELETE', headers: { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' } }).catch(() => {});
        } catch (e) {
            check(id, `POST initialize with Origin ${bad} is answered 403`, false, `request failed: ${e.message}`, { origin: bad });
        }
    }
    try {
        const r = await httpRequest(url, { method: 'POST', headers: { ...headers, Origin: origin }, body: init });
        check('origin-loopback-accepted', `POST initialize with Origin ${origin} is accepted (2xx)`, r.status >= 200 && r.status < 300, `expected 2xx, got ${r.status}`, { origin, status: r.status, body: r.text.slice(0, 300) });
        const sid = r.headers.get('mcp-session-id');
        if (sid) await httpRequest(url, { method: 'DELETE', headers: { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25', Origin: origin } }).catch(() => {});
    } catch (e) {
        check('origin-loopback-accepted', `POST initialize with Origin ${origin} is accepted`, false, `request failed: ${e.message}`, { origin });
    }
    return checks;
}

async function runOriginProbe(result, url) {
    const dir = path.join(OUT, result.run, `runner-${ORIGIN_PROBE}`);
    fs.mkdirSync(dir, { recursive: true });
    const checks = await originProbe(url);
    fs.writeFileSync(path.join(dir, 'checks.json'), JSON.stringify(checks, null, 2));
    result.scenarios.set(ORIGIN_PROBE, { checks, error: null, dir, runner: true });
}

// ------------------------------------------------------------------ targets

async function startFixture() {
    if (!fs.existsSync(FIXTURE_MODULES)) throw new Fatal(`${FIXTURE_MODULES} missing: run scripts/install-test-deps.sh`);
    const proc = new Proc('fixture', process.execPath, [FIXTURE_ENTRY, '--port', '0'], {
        env: { ...CHILD_ENV, NODE_PATH: FIXTURE_MODULES },
        logFile: path.join(OUT, 'fixture.log'),
    });
    const m = await proc.waitForLine(/listening on (127\.0\.0\.1:\d+)/, STARTUP_TIMEOUT_MS);
    proc.addr = m[1];
    log(`fixture pid ${proc.pid} on ${proc.addr}`);
    return proc;
}

async function startGateway(fixtureUrl) {
    if (!fs.existsSync(JUNCTION_BIN)) throw new Fatal(`gateway binary ${JUNCTION_BIN} missing (cargo build --bins, or set JUNCTION_BIN)`);
    const config = path.join(OUT, 'junction.toml');
    fs.writeFileSync(
        config,
        ['[server]', 'listen = "127.0.0.1:0"', '', '[mounts.fixture]', `url = ${JSON.stringify(fixtureUrl)}`, 'namespace = ""', ''].join('\n'),
    );
    const proc = new Proc('junction', JUNCTION_BIN, ['--config', config, '--listen', '127.0.0.1:0'], {
        env: { ...CHILD_ENV, RUST_BACKTRACE: '1' },
        logFile: path.join(OUT, 'junction.log'),
    });
    const m = await proc.waitForLine(/listening on (\d+\.\d+\.\d+\.\d+:\d+)/, STARTUP_TIMEOUT_MS);
    proc.addr = m[1];
    if (!proc.addr.startsWith('127.0.0.1:')) throw new Fatal(`junction bound ${proc.addr}, expected 127.0.0.1:PORT`);
    log(`junction pid ${proc.pid} on ${proc.addr}`);

    const deadline = Date.now() + READY_TIMEOUT_MS;
    let last = 'no answer';
    while (Date.now() < deadline) {
        if (!proc.running) throw new Fatal(`junction exited with ${proc.code ?? proc.signal} while waiting for /readyz; log:\n${proc.tail()}`);
        try {
            const r = await httpRequest(`http://${proc.addr}/readyz`);
            last = `${r.status} ${r.text.slice(0, 500)}`;
            if (r.status === 200) {
                const body = JSON.parse(r.text);
                const bad = (body.mounts ?? []).filter((mt) => mt.state !== 'ready');
                if (bad.length) throw new Fatal(`junction is ready but mounts are not: ${JSON.stringify(bad)}; log:\n${proc.tail()}`);
                return proc;
            }
        } catch (e) {
            if (e instanceof Fatal) throw e;
            last = String(e.message ?? e);
        }
        await sleep(200);
    }
    throw new Fatal(`junction /readyz not 200 within ${READY_TIMEOUT_MS} ms (last: ${last}); log:\n${proc.tail()}`);
}

// ---------------------------------------------------------------- verdicts

function scenarioStatus(entry) {
    if (!entry) return 'NOT RUN';
    // A scenario that checked nothing proves nothing.
    if (!entry.checks || entry.checks.length === 0) return 'NO RESULT';
    if (entry.checks.some((c) => c.status === 'FAILURE')) return 'FAIL';
    if (entry.checks.some((c) => c.status === 'WARNING')) return 'WARN';
    return 'PASS';
}
const passing = (status) => status === 'PASS';

function counts(entry) {
    if (!entry?.checks) return '';
    const n = (s) => entry.checks.filter((c) => c.status === s).length;
    const parts = [`${n('SUCCESS')} ok`];
    if (n('FAILURE')) parts.push(`${n('FAILURE')} fail`);
    if (n('WARNING')) parts.push(`${n('WARNING')} warn`);
    return parts.join(', ');
}

// Compares a direct run with its gateway run. Returns table rows and problems.
function judge(directRun, gatewayRun, baseline) {
    const rows = [];
    const problems = [];
    const notes = [];
    const names = [...directRun.scenarios.keys()];
    for (const n of gatewayRun.scenarios.keys()) if (!names.includes(n)) names.push(n);
    for (const name of names) {
        const d = directRun.scenarios.get(name);
        const g = gatewayRun.scenarios.get(name);
        const ds = scenarioStatus(d);
        const gs = scenarioStatus(g);
        const dAccepted = baseline[directRun.run].get(name);
        const gAccepted = baseline[gatewayRun.run].get(name);
        const required = (REQUIRED_ON_GATEWAY[gatewayRun.run] ?? []).includes(name);
        const verdicts = [];
        let bad = false;

        if (passing(ds)) {
            if (dAccepted !== undefined) {
                bad = true;
                verdicts.push(`STALE BASELINE (${directRun.run})`);
                problems.push(`${directRun.run} / ${name}: passes but ${path.basename(BASELINE)} lists it; delete the entry`);
            }
        } else if (dAccepted !== undefined) {
            verdicts.push(`accepted (${directRun.run})`);
        } else {
            bad = true;
            verdicts.push('FIXTURE FAILS');
            problems.push(`${directRun.run} / ${name}: ${ds} against the fixture and not in the baseline${failureText(d)}`);
        }

        if (passing(gs)) {
            if (gAccepted !== undefined) {
                bad = true;
                verdicts.push(`STALE BASELINE (${gatewayRun.run})`);
                problems.push(`${gatewayRun.run} / ${name}: passes but ${path.basename(BASELINE)} lists it; delete the entry`);
            }
        } else if (required) {
            bad = true;
            verdicts.push('REQUIRED');
            problems.push(`${gatewayRun.run} / ${name}: ${gs} through the gateway; the gateway must pass it${failureText(g)}`);
        } else if (gAccepted !== undefined) {
            verdicts.push(passing(ds) ? `accepted (${gatewayRun.run}; fixture passes)` : `accepted (${gatewayRun.run})`);
        } else if (passing(ds)) {
            bad = true;
            verdicts.push('REGRESSION');
            problems.push(`${gatewayRun.run} / ${name}: the fixture passes, the gateway does not (${gs})${failureText(g)}`);
        } else {
            bad = true;
            verdicts.push('GATEWAY FAILS');
            problems.push(`${gatewayRun.run} / ${name}: ${gs} through the gateway and not in the baseline${failureText(g)}`);
        }

        // Check-level: a check that succeeded directly but not through the
        // gateway, in a scenario both pass (e.g. SUCCESS -> INFO), is a
        // regression unless `checks` in the baseline accepts it.
        if (passing(ds) && passing(gs)) {
            for (const c of d.checks.filter((c) => c.status === 'SUCCESS')) {
                const gc = g.checks.filter((x) => x.id === c.id);
                const key = `${name}/${c.id}`;
                const accepted = baseline.checks[gatewayRun.run].get(key);
                if (!gc.some((x) => x.status === 'SUCCESS')) {
                    const got = gc.map((x) => x.status).join('/') || 'absent';
                    const why = gc.map((x) => x.details?.message ?? x.errorMessage).filter(Boolean)[0];
                    const seen = `check ${c.id} SUCCESS direct, ${got} through the gateway${why ? ` (${why})` : ''}`;
                    if (accepted !== undefined) {
                        notes.push(`${gatewayRun.run} / ${name}: ${seen}; accepted: ${accepted.reason}`);
                    } else {
                        bad = true;
                        verdicts.push('CHECK REGRESSION');
                        problems.push(`${gatewayRun.run} / ${name}: ${seen}, and not in the baseline's checks`);
                    }
                } else if (accepted?.sometimes) {
                    notes.push(`${gatewayRun.run} / ${key}: the accepted difference did not occur this run (it depends on timing)`);
                } else if (accepted !== undefined) {
                    bad = true;
                    verdicts.push('STALE BASELINE (check)');
                    problems.push(`${gatewayRun.run} / ${key}: succeeds through the gateway but the baseline's checks list it; delete the entry`);
                }
            }
        }

        const reason = gAccepted ?? dAccepted;
        rows.push({
            name: d?.runner || g?.runner ? `${name} (runner)` : name,
            direct: `${ds}${counts(d) ? ` (${counts(d)})` : ''}`,
            gateway: `${gs}${counts(g) ? ` (${counts(g)})` : ''}`,
            verdict: verdicts.length ? verdicts.join('; ') : 'ok',
            reason,
            bad,
        });
    }

    for (const run of [directRun, gatewayRun]) {
        for (const name of baseline[run.run].keys()) {
            if (!run.scenarios.has(name)) problems.push(`${run.run} / ${name}: listed in the baseline but not run; delete the entry`);
        }
        if (run.timedOut) problems.push(`${run.run}: the suite timed out (log: ${path.relative(ROOT, run.log)})`);
    }
    for (const name of REQUIRED_ON_GATEWAY[gatewayRun.run] ?? []) {
        if (!gatewayRun.scenarios.has(name)) problems.push(`${gatewayRun.run} / ${name}: required but not run`);
    }
    return { rows, problems, notes };
}

function failureText(entry) {
    if (!entry) return ': not run';
    if (!entry.checks) return `: ${entry.error}`;
    const failed = entry.checks.filter((c) => c.status === 'FAILURE' || c.status === 'WARNING');
    return failed.length
        ? ':\n      ' + failed.slice(0, 4).map((c) => `${c.status} ${c.id}: ${(c.errorMessage ?? c.description ?? '').replace(/\s+/g, ' ').slice(0, 300)}`).join('\n      ')
        : '';
}

// A suite that exited non-zero although nothing in its run failed unexpectedly.
function suiteExitProblems(result, judged) {
    if (result.timedOut || result.exitCode === 0) return [];
    const anyBad = judged.rows.some((r) => r.bad);
    return anyBad ? [] : [`${result.run}: the suite exited ${result.exitCode ?? 'by signal'} although every scenario passed or is accepted (log: ${path.relative(ROOT, result.log)})`];
}

function table(title, rows) {
    const head = { name: 'scenario', direct: 'direct (fixture)', gateway: 'through junction', verdict: 'verdict' };
    const w = {};
    for (const k of Object.keys(head)) w[k] = Math.max(head[k].length, ...rows.map((r) => r[k].length));
    const line = (r) => `  ${r.name.padEnd(w.name)}  ${r.direct.padEnd(w.direct)}  ${r.gateway.padEnd(w.gateway)}  ${r.verdict}`;
    const out = [``, title, line(head), `  ${'-'.repeat(w.name + w.direct + w.gateway + w.verdict + 6)}`];
    for (const r of rows) {
        out.push(line(r));
        if (r.reason) out.push(`  ${''.padEnd(w.name)}  reason: ${r.reason}`);
    }
    return out.join('\n');
}

// --------------------------------------------------------------------- main

async function main() {
    const major = Number(process.versions.node.split('.')[0]);
    if (major < 22) throw new Fatal(`needs Node >= 22 (this is ${process.version}); use tests/conformance/run.sh`);
    fs.rmSync(OUT, { recursive: true, force: true });
    fs.mkdirSync(OUT, { recursive: true });

    const baseline = loadBaseline();
    const stable = suiteEntry(STABLE_PREFIX);
    const alpha = suiteEntry(ALPHA_PREFIX);
    log(`suites: stable ${stable.version}, alpha ${alpha.version}; artifacts in ${path.relative(ROOT, OUT) || OUT}`);

    const stopProblems = [];
    let fixture;
    let gateway;
    const results = {};
    try {
        fixture = await startFixture();
        const fixtureUrl = `http://${fixture.addr}/mcp`;
        results.direct = await runSuite('direct', stable, fixtureUrl, ['--suite', 'active'], STABLE_SUITE_TIMEOUT_MS, baseline);
        await runOriginProbe(results.direct, fixtureUrl);

        gateway = await startGateway(fixtureUrl);
        const gatewayUrl = `http://${gateway.addr}/mcp`;
        results.gateway = await runSuite('gateway', stable, gatewayUrl, ['--suite', 'active'], STABLE_SUITE_TIMEOUT_MS, baseline);
        await runOriginProbe(results.gateway, gatewayUrl);

        const alphaArgs = ['--requirements', '2025-11-25', '--timeout', String(ALPHA_SCENARIO_TIMEOUT_MS)];
        results['alpha-direct'] = await runSuite('alpha-direct', alpha, fixtureUrl, alphaArgs, ALPHA_SUITE_TIMEOUT_MS, baseline);
        results['alpha-gateway'] = await runSuite('alpha-gateway', alpha, gatewayUrl, alphaArgs, ALPHA_SUITE_TIMEOUT_MS, baseline);
    } finally {
        for (const p of [gateway, fixture]) {
            if (!p) continue;
            if (!p.running) stopProblems.push(`${p.name} (pid ${p.pid}) had exited with ${p.code ?? p.signal} before the end; log: ${path.relative(ROOT, path.join(OUT, p.name + '.log'))}`);
            const problem = await p.stop();
            if (problem) stopProblems.push(problem);
        }
    }

    const stableJ = judge(results.direct, results.gateway, baseline);
    const alphaJ = judge(results['alpha-direct'], results['alpha-gateway'], baseline);
    const problems = [
        ...stableJ.problems,
        ...suiteExitProblems(results.direct, stableJ),
        ...suiteExitProblems(results.gateway, stableJ),
        ...alphaJ.problems,
        ...suiteExitProblems(results['alpha-direct'], alphaJ),
        ...suiteExitProblems(results['alpha-gateway'], alphaJ),
        ...stopProblems,
    ];

    const out = [];
    out.push(table(`Stable suite ${stable.version} (--suite active) + runner probe`, stableJ.rows));
    out.push(table(`Alpha suite ${alpha.version} (--requirements 2025-11-25)`, alphaJ.rows));
    const notes = [...stableJ.notes, ...alphaJ.notes];
    if (notes.length) out.push(`\nAccepted check differences (baseline.yml checks):\n  ${notes.join('\n  ')}`);
    if (problems.length) out.push(`\nProblems:\n  - ${problems.join('\n  - ')}`);
    out.push(`\nArtifacts: ${OUT} (suite logs, checks.json per scenario, junction.log, fixture.log)`);
    const allRows = [...stableJ.rows, ...alphaJ.rows];
    const failed = allRows.filter((r) => r.bad).length + (problems.length && !allRows.some((r) => r.bad) ? 1 : 0);
    out.push(`\nconformance: ${allRows.length - allRows.filter((r) => r.bad).length} passed, ${failed} failed`);
    console.log(out.join('\n'));

    fs.writeFileSync(
        path.join(OUT, 'summary.json'),
        JSON.stringify({ stable: stable.version, alpha: alpha.version, rows: { stable: stableJ.rows, alpha: alphaJ.rows }, notes, problems }, null, 2),
    );
    return problems.length ? 1 : 0;
}

main().then(
    (code) => process.exit(code),
    async (err) => {
        console.error(`[conformance] error: ${err instanceof Fatal ? err.message : err?.stack ?? err}`);
        await Promise.all([...live].map((p) => p.stop(3000)));
        process.exit(1);
    },
);
