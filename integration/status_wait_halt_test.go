package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/virtualtables"
)

// TestStatusCaptureWait: a transform whose capture install cannot take its
// table lock (another session's open transaction wrote the table) shows
// status.capture_wait with the holder, and the wait as its problem; the
// wait clears and the transform goes live once the holder commits.
func TestStatusCaptureWait(t *testing.T) {
	h := startTrellis(t)
	c := h.client(t)
	ctx := context.Background()
	mustExec(t, c, `CREATE TABLE cw_src (id bigint PRIMARY KEY, v int)`)
	mustExec(t, c, `INSERT INTO cw_src SELECT g, g FROM generate_series(1, 5) g`)
	holder := h.client(t)
	var pid int
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	mustExec(t, holder, `BEGIN`)
	mustExec(t, holder, `UPDATE cw_src SET v = v WHERE id = 1`) // holds ROW EXCLUSIVE until COMMIT
	mustExec(t, c, `TRANSFORM cw_x FROM cw_src SELECT v AS w`)
	var wait, problem string
	eventually(t, 30*time.Second, "status.capture_wait", func() bool {
		wait = qString(t, c, `SELECT coalesce(capture_wait::text, '') FROM trellis.status WHERE target = 'cw_x'`)
		return wait != ""
	})
	got := qString(t, c, `SELECT concat_ws(' | ', capture_wait ->> 'table_name', capture_wait ->> 'operation', capture_wait ->> 'lock_mode',
		capture_wait ->> 'blockers', (capture_wait ->> 'waiting_since' <= capture_wait ->> 'observed_at')::text, status)
		FROM trellis.status WHERE target = 'cw_x'`)
	want := fmt.Sprintf(`public.cw_src | install | ShareRowExclusiveLock | ["pid %d (client backend) holds RowExclusiveLock for `, pid)
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, " | true | waiting_to_backfill") {
		t.Fatalf("capture_wait: %s\nwant it to start %q and end true | waiting_to_backfill", got, want)
	}
	problem = qString(t, c, `SELECT problem FROM trellis.status WHERE target = 'cw_x'`)
	if !strings.HasPrefix(problem, "waiting for ShareRowExclusiveLock on public.cw_src held by 1 session since ") {
		t.Fatalf("problem: %q", problem)
	}
	report, err := virtualtables.StatusReport(ctx, h.pool)
	if err != nil {
		t.Fatal(err)
	}
	if line := "    capture install on public.cw_src waiting for ShareRowExclusiveLock since "; !strings.Contains(report, line) ||
		!strings.Contains(report, fmt.Sprintf(`: blockers="pid %d (client backend) holds RowExclusiveLock for `, pid)) {
		t.Fatalf("the status report does not show the wait:\n%s", report)
	}
	mustExec(t, holder, `COMMIT`)
	h.waitStatus(t, "cw_x", "live")
	if got := qString(t, c, `SELECT (capture_wait IS NULL AND problem IS NULL)::text FROM trellis.status WHERE target = 'cw_x'`); got != "true" {
		t.Fatalf("after the holder's commit: capture_wait or problem still set (%s)", got)
	}
	if n := qString(t, c, `SELECT count(*) FROM trellis._capture_waits`); n != "0" {
		t.Fatalf("%s capture waits left", n)
	}
}

// TestStatusHalt: a transform the drain paused (its share of a page failed
// on every attempt, D21) reads as halted: definitions.halted and halt,
// capture_failure of kind halt naming the table, problem "halted: ...";
// its neighbour on the same source stays live and not halted, and RESUME
// clears the halt.
func TestStatusHalt(t *testing.T) {
	h := startTrellisFaults(t)
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE ht_src (id bigint PRIMARY KEY, v int)`)
	mustExec(t, c, `INSERT INTO ht_src SELECT g, g FROM generate_series(1, 5) g`)
	mustExec(t, c, `TRANSFORM ht_x FROM ht_src SELECT v * 2 AS x`)
	mustExec(t, c, `TRANSFORM ht_ok FROM ht_src SELECT v AS y`)
	h.waitStatus(t, "ht_x", "live")
	h.waitStatus(t, "ht_ok", "live")
	mustExec(t, c, `CREATE FUNCTION ht_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'ht_x under maintenance' USING ERRCODE = '55006'; END $$`)
	mustExec(t, c, `CREATE TRIGGER ht_refuse BEFORE UPDATE ON ht_x FOR EACH ROW EXECUTE FUNCTION ht_refuse()`)
	mustExec(t, c, `UPDATE ht_src SET v = v + 1 WHERE id = 3`)
	eventually(t, 30*time.Second, "ht_x's share held", func() bool {
		return qString(t, c, `SELECT count(*) FROM trellis._page_failures`) == "1"
	})
	// The backoff to the tenth attempt takes about a minute: skip to it.
	mustExec(t, c, `UPDATE trellis._page_failures SET attempts = 9, next_attempt_at = now()`)
	h.waitStatus(t, "ht_x", "paused")
	got := qString(t, c, `SELECT concat_ws(' | ', halted::text, halt ->> 'source_table', halt ->> 'error', halt ->> 'columns', status)
		FROM trellis.definitions WHERE target = 'ht_x'`)
	if got != "true | public.ht_src | ht_x under maintenance | [] | paused" {
		t.Fatalf("definitions of ht_x: %s", got)
	}
	got = qString(t, c, `SELECT concat_ws(' | ', capture_failure ->> 'kind', problem) FROM trellis.status WHERE target = 'ht_x'`)
	if got != "halt | halted: ht_x under maintenance" {
		t.Fatalf("status of ht_x: %s", got)
	}
	if got := qString(t, c, `SELECT concat_ws(' | ', halted::text, status) FROM trellis.definitions WHERE target = 'ht_ok'`); got != "false | live" {
		t.Fatalf("definitions of ht_ok: %s", got)
	}
	mustExec(t, c, `DROP TRIGGER ht_refuse ON ht_x`)
	mustExec(t, c, `RESUME TRANSFORM ht_x`)
	h.waitStatus(t, "ht_x", "live")
	if got := qString(t, c, `SELECT concat_ws(' | ', halted::text, coalesce(halt::text, '-')) FROM trellis.definitions WHERE target = 'ht_x'`); got != "false | -" {
		t.Fatalf("after RESUME: %s", got)
	}
}
