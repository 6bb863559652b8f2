// node-postgres (pg) and postgres.js scenarios for cmd/trellis-clients.
// One line per case on stdout: "PASS name", "FAIL name: why", "SKIP name: why".
// Connection from PGHOST/PGPORT/PGUSER/PGDATABASE; CLIENTS_PATH=proxy runs
// the Trellis cases too (Postgres itself has no TRANSFORM); CLIENTS_TAG keeps
// the direct and proxy runs' tables apart.
import net from 'node:net';
import pg from 'pg';
import postgres from 'postgres';

const viaProxy = process.env.CLIENTS_PATH === 'proxy';
const tag = process.env.CLIENTS_TAG || 'x';
const cfg = {
  host: process.env.PGHOST, port: Number(process.env.PGPORT),
  user: process.env.PGUSER, database: process.env.PGDATABASE,
};
const t = (name) => `node_${tag}_${name}`;

function assert(cond, msg) { if (!cond) throw new Error(msg); }
function line(s) { process.stdout.write(s.replace(/\n/g, ' ') + '\n'); }

async function withTimeout(p, ms, what) {
  let timer;
  const to = new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms); });
  try { return await Promise.race([p, to]); } finally { clearTimeout(timer); }
}

async function test(name, fn, { trellis = false } = {}) {
  if (trellis && !viaProxy) { line(`SKIP ${name}: Trellis statement, proxy only`); return; }
  try {
    await withTimeout(fn(), 90000, name);
    line(`PASS ${name}`);
  } catch (e) {
    line(`FAIL ${name}: ${e.code ? e.code + ' ' : ''}${e.message}`);
  }
}

async function client() {
  const c = new pg.Client(cfg);
  c.on('error', () => {}); // a terminated backend also emits here
  await c.connect();
  return c;
}

// A raw CancelRequest with the key the driver was given in BackendKeyData:
// what any driver does when it cancels.
function sendCancel(pid, secret) {
  return new Promise((resolve, reject) => {
    const s = net.connect(cfg.port, cfg.host, () => {
      const b = Buffer.alloc(16);
      b.writeInt32BE(16, 0); b.writeInt32BE(80877102, 4); b.writeInt32BE(pid, 8); b.writeInt32BE(secret, 12);
      s.end(b);
    });
    s.on('close', resolve); s.on('error', reject);
  });
}

async function pgScenarios() {
  const c = await client();
  try {
    await c.query(`DROP TABLE IF EXISTS ${t('items')}, ${t('tx')}`);
    await c.query(`CREATE TABLE ${t('items')} (id bigint PRIMARY KEY, name text NOT NULL)`);
    await c.query(`CREATE TABLE ${t('tx')} (id bigint PRIMARY KEY)`);
  } finally { await c.end(); }

  await test('pg.simple_query', async () => {
    const c = await client();
    try {
      const r = await c.query('SELECT 1 AS x, $$a;b$$::text AS y');
      assert(r.rows[0].x === 1 && r.rows[0].y === 'a;b', JSON.stringify(r.rows));
    } finally { await c.end(); }
  });

  await test('pg.multi_statement_simple_query', async () => {
    const c = await client();
    try {
      const r = await c.query('SELECT 1 AS a; SELECT 2 AS b, 3 AS c');
      assert(Array.isArray(r) && r.length === 2 && r[1].rows[0].c === 3, JSON.stringify(r));
    } finally { await c.end(); }
  });

  await test('pg.extended_query_params', async () => {
    const c = await client();
    try {
      const r = await c.query('SELECT $1::int + 1 AS x, $2::text AS y', [41, 'z']);
      assert(r.rows[0].x === 42 && r.rows[0].y === 'z', JSON.stringify(r.rows));
    } finally { await c.end(); }
  });

  await test('pg.named_prepared_statement_reused', async () => {
    const c = await client();
    try {
      for (const v of ['a', 'b', 'c']) {
        const r = await c.query({ name: 'echo', text: 'SELECT $1::text AS v', values: [v] });
        assert(r.rows[0].v === v, JSON.stringify(r.rows));
      }
    } finally { await c.end(); }
  });

  await test('pg.error_then_recover', async () => {
    const c = await client();
    try {
      let code;
      try { await c.query('SELEC 1'); } catch (e) { code = e.code; }
      assert(code === '42601', `want 42601, got ${code}`);
      try { await c.query('SELECT 1/$1::int', [0]); } catch (e) { code = e.code; }
      assert(code === '22012', `want 22012, got ${code}`);
      const r = await c.query('SELECT 7 AS x', []);
      assert(r.rows[0].x === 7, 'no recovery');
    } finally { await c.end(); }
  });

  await test('pg.transaction_commit_rollback', async () => {
    const c = await client();
    try {
      await c.query('BEGIN');
      await c.query(`INSERT INTO ${t('tx')} VALUES ($1)`, [1]);
      await c.query('ROLLBACK');
      await c.query('BEGIN');
      await c.query(`INSERT INTO ${t('tx')} VALUES ($1)`, [2]);
      await c.query('COMMIT');
      const r = await c.query(`SELECT array_agg(id ORDER BY id)::text AS ids FROM ${t('tx')}`);
      assert(r.rows[0].ids === '{2}', r.rows[0].ids);
      await c.query('BEGIN');
      try { await c.query('SELECT 1/0'); } catch (e) { /* aborted now */ }
      let code;
      try { await c.query('SELECT 1'); } catch (e) { code = e.code; }
      assert(code === '25P02', `want 25P02 in an aborted block, got ${code}`);
      await c.query('ROLLBACK');
    } finally { await c.end(); }
  });

  await test('pg.backend_pid_matches_reported_pid', async () => {
    const c = await client();
    try {
      const r = await c.query('SELECT pg_backend_pid() AS pid');
      assert(r.rows[0].pid === c.processID, `server ${r.rows[0].pid}, BackendKeyData ${c.processID}`);
      const a = await c.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [c.processID]);
      assert(a.rows[0].n === 1, 'pg_stat_activity has no row for the reported pid');
    } finally { await c.end(); }
  });

  await test('pg.listen_notify_self_sender_pid', async () => {
    const c = await client();
    try {
      await c.query(`LISTEN ${t('chan')}`);
      const got = new Promise((resolve) => c.once('notification', resolve));
      await c.query(`NOTIFY ${t('chan')}, 'hello'`);
      const n = await withTimeout(got, 10000, 'notification');
      assert(n.payload === 'hello', n.payload);
      assert(n.processId === c.processID, `sender pid ${n.processId}, own reported pid ${c.processID}`);
    } finally { await c.end(); }
  });

  await test('pg.listen_notify_other_session', async () => {
    const l = await client(), s = await client();
    try {
      await l.query(`LISTEN ${t('chan2')}`);
      const got = new Promise((resolve) => l.once('notification', resolve));
      await s.query('SELECT pg_notify($1, $2)', [t('chan2'), 'from-s']);
      const n = await withTimeout(got, 10000, 'notification');
      assert(n.payload === 'from-s' && n.processId === s.processID, `payload ${n.payload} pid ${n.processId} sender ${s.processID}`);
    } finally { await l.end(); await s.end(); }
  });

  await test('pg.terminate_own_reported_pid_57P01', async () => {
    const c = await client();
    let code;
    try {
      await c.query('SELECT pg_terminate_backend($1)', [c.processID]);
    } catch (e) { code = e.code; }
    try { await c.end(); } catch (e) { /* already gone */ }
    assert(code === '57P01', `want 57P01, got ${code}`);
  });

  await test('pg.terminate_from_other_session', async () => {
    const victim = await client(), killer = await client();
    try {
      const errored = new Promise((resolve) => victim.once('error', resolve));
      const r = await killer.query('SELECT pg_terminate_backend($1) AS ok', [victim.processID]);
      assert(r.rows[0].ok === true, 'pg_terminate_backend found no backend with the reported pid');
      const e = await withTimeout(errored, 10000, 'victim error');
      assert(e.code === '57P01', `victim got ${e.code} ${e.message}`);
    } finally { await killer.end(); try { await victim.end(); } catch (e) { /* gone */ } }
  });

  await test('pg.cancel_request_with_reported_key', async () => {
    const c = await client();
    try {
      const q = c.query('SELECT pg_sleep(30)').then(() => ({}), (e) => e);
      await new Promise((r) => setTimeout(r, 300));
      await sendCancel(c.processID, c.secretKey);
      const { code } = await q;
      assert(code === '57014', `want 57014, got ${code}`);
      const r = await c.query('SELECT 1 AS x');
      assert(r.rows[0].x === 1, 'session unusable after cancel');
    } finally { await c.end(); }
  });

  await test('pg.statement_timeout', async () => {
    const c = await client();
    try {
      await c.query(`SET statement_timeout = '200ms'`);
      let code;
      try { await c.query('SELECT pg_sleep($1)', [5]); } catch (e) { code = e.code; }
      assert(code === '57014', `want 57014, got ${code}`);
    } finally { await c.end(); }
  });

  await test('pg.transform_simple_query', async () => {
    const c = await client();
    try {
      await c.query(`INSERT INTO ${t('items')} VALUES (1, 'one'), (2, 'two')`);
      const r = await c.query(`TRANSFORM ${t('upper')} FROM ${t('items')} SELECT upper(name) AS uname`);
      assert(r.rows[0].kind === 'transform_defined', JSON.stringify(r.rows[0]));
      const live = await c.query('SELECT trellis.await_live($1, 60000) AS s', [t('upper')]);
      assert(live.rows[0].s === 'live', live.rows[0].s);
      await c.query(`INSERT INTO ${t('items')} VALUES (3, 'three')`);
      await c.query('SELECT trellis.await_converged(trellis.watermark_token(), 30000)');
      const v = await c.query(`SELECT uname FROM ${t('upper')} WHERE id = $1`, [3]);
      assert(v.rows[0]?.uname === 'THREE', JSON.stringify(v.rows));
    } finally { await c.end(); }
  }, { trellis: true });

  await test('pg.transform_extended_named', async () => {
    const c = await client();
    try {
      const r = await c.query({ name: 'tf', text: `TRANSFORM ${t('lens')} FROM ${t('items')} SELECT length(name) AS len` });
      assert(r.rows[0].kind === 'transform_defined', JSON.stringify(r.rows[0]));
    } finally { await c.end(); }
  }, { trellis: true });

  await test('pg.transform_in_transaction', async () => {
    const c = await client();
    try {
      await c.query('BEGIN');
      await c.query(`CREATE TABLE ${t('pay')} (id bigint PRIMARY KEY, who text, amount numeric)`);
      await c.query(`TRANSFORM ${t('paid')} FROM ${t('pay')} GROUP BY who SELECT SUM(amount) AS total`);
      await c.query('COMMIT');
      const live = await c.query('SELECT trellis.await_live($1, 60000) AS s', [t('paid')]);
      assert(live.rows[0].s === 'live', live.rows[0].s);
    } finally { await c.end(); }
  }, { trellis: true });

  await test('pg.notice_honours_client_min_messages', async () => {
    const c = await client();
    try {
      const notices = [];
      c.on('notice', (n) => notices.push(n.message));
      await c.query('SET client_min_messages = warning');
      await c.query(`TRANSFORM ${t('quiet')} FROM ${t('items')} SELECT name || '.' AS dotted`);
      await c.query('DO $$ BEGIN RAISE NOTICE $q$suppressed too$q$; END $$');
      assert(notices.length === 0, `NOTICEs delivered at client_min_messages=warning: ${JSON.stringify(notices)}`);
      await c.query('RESET client_min_messages');
      await c.query(`TRANSFORM ${t('loud')} FROM ${t('items')} SELECT name || ',' AS commaed`);
      assert(notices.length === 1, `want the transform's NOTICE at the default level, got ${JSON.stringify(notices)}`);
    } finally { await c.end(); }
  }, { trellis: true });

  await test('pg.transform_after_cr_ended_comment', async () => {
    // Postgres's lexer ends a -- comment at \r as well as at \n.
    const c = await client();
    try {
      const r = await c.query(`-- migration 7\rTRANSFORM ${t('cr')} FROM ${t('items')} SELECT name AS same`);
      assert(r.rows[0]?.kind === 'transform_defined', JSON.stringify(r.rows));
    } finally { await c.end(); }
  }, { trellis: true });

  await test('pg.trellis_status_select', async () => {
    const c = await client();
    try {
      const r = await c.query('SELECT * FROM trellis.status');
      assert(r.rows.length >= 1 && 'target' in r.rows[0], JSON.stringify(r.rows));
      const p = await c.query('SELECT target, status FROM trellis.status WHERE target = $1', [t('upper')]);
      assert(p.rows.length === 1, JSON.stringify(p.rows));
    } finally { await c.end(); }
  }, { trellis: true });
}

async function postgresJsScenarios() {
  const opts = { ...cfg, username: cfg.user, max: 1, onnotice: () => {}, idle_timeout: 5 };
  const sql = postgres(opts);
  try {
    await sql.unsafe(`DROP TABLE IF EXISTS ${t('js')}`);
    await sql.unsafe(`CREATE TABLE ${t('js')} (id bigint PRIMARY KEY, name text NOT NULL)`);
  } catch (e) {
    line(`FAIL pgjs.setup: ${e.message}`);
  }

  await test('pgjs.simple_query', async () => {
    const r = await sql`SELECT 1 AS x`.simple();
    assert(r[0].x === 1, JSON.stringify(r));
  });

  await test('pgjs.extended_prepared_reused', async () => {
    for (const v of [1, 2, 3]) {
      const r = await sql`SELECT ${v}::int * 2 AS x`;
      assert(r[0].x === v * 2, JSON.stringify(r));
    }
  });

  await test('pgjs.unprepared_extended', async () => {
    const r = await sql.unsafe('SELECT $1::text AS v', ['u'], { prepare: false });
    assert(r[0].v === 'u', JSON.stringify(r));
  });

  await test('pgjs.pipelined_queries', async () => {
    const rs = await Promise.all([1, 2, 3, 4, 5].map((i) => sql`SELECT ${i}::int AS i, pg_backend_pid() AS pid`));
    assert(rs.map((r) => r[0].i).join() === '1,2,3,4,5', JSON.stringify(rs));
  });

  await test('pgjs.transaction_and_rollback', async () => {
    await sql.begin(async (sql) => { await sql`INSERT INTO ${sql(t('js'))} VALUES (1, 'a')`; });
    try {
      await sql.begin(async (sql) => {
        await sql`INSERT INTO ${sql(t('js'))} VALUES (2, 'b')`;
        throw new Error('rollback please');
      });
    } catch (e) { /* expected */ }
    const r = await sql`SELECT count(*)::int AS n FROM ${sql(t('js'))}`;
    assert(r[0].n === 1, JSON.stringify(r));
  });

  await test('pgjs.copy_in_out', async () => {
    const w = await sql`COPY ${sql(t('js'))} (id, name) FROM STDIN`.writable();
    await new Promise((resolve, reject) => {
      w.on('error', reject); w.on('finish', resolve);
      for (let i = 10; i < 1010; i++) w.write(`${i}\tn${i}\n`);
      w.end();
    });
    const r = await sql`SELECT count(*)::int AS n FROM ${sql(t('js'))}`;
    assert(r[0].n === 1001, `after COPY in: ${r[0].n}`);
    const rd = await sql`COPY ${sql(t('js'))} TO STDOUT`.readable();
    let lines = 0;
    for await (const chunk of rd) lines += chunk.toString().split('\n').length - 1;
    assert(lines === 1001, `COPY out lines ${lines}`);
  });

  await test('pgjs.cancel', async () => {
    const q = sql`SELECT pg_sleep(30)`;
    const p = q.execute().then(() => ({}), (e) => e);
    await new Promise((r) => setTimeout(r, 300));
    q.cancel();
    const { code } = await p;
    assert(code === '57014', `want 57014, got ${code}`);
    const r = await sql`SELECT 1 AS x`;
    assert(r[0].x === 1, 'unusable after cancel');
  });

  await test('pgjs.listen_notify', async () => {
    const l = postgres({ ...opts, max: 1 });
    try {
      let resolve;
      const got = new Promise((r) => { resolve = r; });
      await l.listen(t('jschan'), (payload) => resolve(payload));
      await sql.notify(t('jschan'), 'hi');
      const payload = await withTimeout(got, 10000, 'notification');
      assert(payload === 'hi', payload);
    } finally { await l.end(); }
  });

  await test('pgjs.transform_prepared', async () => {
    const r = await sql.unsafe(`TRANSFORM ${t('jsup')} FROM ${t('js')} SELECT upper(name) AS uname`, [], { prepare: true });
    assert(r[0].kind === 'transform_defined', JSON.stringify(r));
    const live = await sql`SELECT trellis.await_live(${t('jsup')}, 60000) AS s`;
    assert(live[0].s === 'live', live[0].s);
  }, { trellis: true });

  await test('pgjs.transform_in_begin', async () => {
    await sql.begin(async (sql) => {
      await sql.unsafe(`CREATE TABLE ${t('jspay')} (id bigint PRIMARY KEY, who text, amount numeric)`);
      await sql.unsafe(`TRANSFORM ${t('jspaid')} FROM ${t('jspay')} GROUP BY who SELECT SUM(amount) AS total`);
    });
    const r = await sql`SELECT status FROM trellis.status WHERE target = ${t('jspaid')}`;
    assert(r.length === 1, JSON.stringify(r));
  }, { trellis: true });

  await test('pgjs.pipelined_sql_and_trellis', async () => {
    // Several Sync batches in one write: each is a batch of its own, so
    // this is not a shared-Sync batch.
    const rs = await Promise.all([
      sql`SELECT 1 AS a`,
      sql`SELECT count(*)::int AS n FROM trellis.status`,
      sql.unsafe(`TRANSFORM ${t('jslen')} FROM ${t('js')} SELECT length(name) AS len`),
      sql`SELECT 2 AS b`,
    ]);
    assert(rs[2][0].kind === 'transform_defined' && rs[3][0].b === 2, JSON.stringify(rs));
  }, { trellis: true });

  await test('pgjs.trellis_status', async () => {
    const r = await sql`SELECT * FROM trellis.status`;
    assert(r.length >= 1, JSON.stringify(r));
  }, { trellis: true });

  await sql.end({ timeout: 5 });
}

// A stray rejection must not end the run silently.
process.on('unhandledRejection', (e) => line(`FAIL unhandled: ${e?.code || ''} ${e?.message || e}`));

await pgScenarios();
await postgresJsScenarios();
