package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// The hazards of joins spec §6, one test each, with the interleaving
// forced through the page hooks (a page held at a stage while the test
// commits the other side). Each hazard also runs with a planted fault
// that its interleaving exposes and must then diverge: the test shows it
// can fail.

// hzHolds holds the first page reaching an armed stage until released.
type hzHolds struct {
	mu    sync.Mutex
	armed map[string]*hzHold
	gates []*gate
}

type hzHold struct {
	held    chan struct{}
	release *gate
	once    sync.Once
}

func (h *hzHolds) hook(stage string) {
	h.mu.Lock()
	hd := h.armed[stage]
	if hd != nil {
		delete(h.armed, stage)
	}
	h.mu.Unlock()
	if hd != nil {
		hd.once.Do(func() { close(hd.held) })
		hd.release.wait()
	}
}

// arm holds the next page reaching stage.
func (h *hzHolds) arm(stage string) *hzHold {
	hd := &hzHold{held: make(chan struct{}), release: newGate()}
	h.mu.Lock()
	h.armed[stage] = hd
	h.gates = append(h.gates, hd.release)
	h.mu.Unlock()
	return hd
}

// await waits until a page is held at the armed stage.
func (hd *hzHold) await(t *testing.T, what string) {
	t.Helper()
	select {
	case <-hd.held:
	case <-time.After(60 * time.Second):
		hd.release.open()
		t.Fatalf("no page reached %s", what)
	}
}

// hzEnv is a star and snowflake (orders -> customers -> regions) with a
// 1-1 LEFT target over the snowflake, a 1-1 INNER target and an
// aggregate by a dimension column, on an engine whose hooks the test
// holds.
type hzEnv struct {
	t     *testing.T
	pool  *pgxpool.Pool
	e     *Engine
	holds *hzHolds
}

var hzChecks = []struct{ got, want string }{
	{`SELECT id, v, cust, region FROM hz_wide`,
		`SELECT o.id, o.v, c.name, r.name FROM hz_ord o LEFT JOIN hz_cust c ON c.id = o.cust_id LEFT JOIN hz_region r ON r.id = c.region_id`},
	{`SELECT id, cust FROM hz_inner`, `SELECT o.id, c.name FROM hz_ord o JOIN hz_cust c ON c.id = o.cust_id`},
	{`SELECT name, total, n FROM hz_agg`, `SELECT c.name, sum(o.v), count(*) FROM hz_ord o LEFT JOIN hz_cust c ON c.id = o.cust_id GROUP BY c.name`},
}

func newHzEnv(t *testing.T, plant worker.Plants, fanOutInlineKeys int) *hzEnv {
	pool := testDB(t)
	for _, q := range []string{
		`CREATE TABLE hz_region (id int PRIMARY KEY, name text)`,
		`CREATE TABLE hz_cust (id int PRIMARY KEY, name text, region_id int)`,
		`CREATE INDEX ON hz_cust (region_id)`,
		`CREATE TABLE hz_ord (id int PRIMARY KEY, cust_id int, v int)`,
		`CREATE INDEX ON hz_ord (cust_id)`,
		`INSERT INTO hz_region SELECT g, 'region ' || g FROM generate_series(1, 3) g`,
		`INSERT INTO hz_cust SELECT g, 'cust ' || g, g % 3 + 1 FROM generate_series(1, 6) g`,
		`INSERT INTO hz_ord SELECT g, g % 6 + 1, g FROM generate_series(1, 30) g`,
	} {
		exec(t, pool, q)
	}
	h := &hzHolds{armed: map[string]*hzHold{}}
	cfg := fastConfig()
	cfg.FanOutInlineKeys = fanOutInlineKeys
	e := New(pool, cfg)
	e.w.Plant = plant
	e.w.Plant.PageHook = h.hook
	runHooked(t, e)
	t.Cleanup(func() { // before the engine stops (cleanups run last-in first)
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, g := range h.gates {
			g.open()
		}
	})
	for _, s := range []string{
		`TRANSFORM hz_wide FROM hz_ord o LEFT JOIN hz_cust c ON c.id = o.cust_id LEFT JOIN hz_region r ON r.id = c.region_id
			SELECT o.v AS v, c.name AS cust, r.name AS region`,
		`TRANSFORM hz_inner FROM hz_ord o JOIN hz_cust c ON c.id = o.cust_id SELECT c.name AS cust`,
		`TRANSFORM hz_agg FROM hz_ord o LEFT JOIN hz_cust c ON c.id = o.cust_id GROUP BY c.name SELECT SUM(o.v) AS total, COUNT(*) AS n`,
	} {
		transform(t, e, s)
	}
	for _, n := range []string{"hz_wide", "hz_inner", "hz_agg"} {
		awaitLive(t, e, n)
	}
	env := &hzEnv{t: t, pool: pool, e: e, holds: h}
	if d := env.differs(); d != "" {
		t.Fatalf("after the builds: %s", d)
	}
	return env
}

// differs converges and returns how the targets differ from their joins.
func (h *hzEnv) differs() string {
	h.t.Helper()
	converge(h.t, h.e)
	var out []string
	for _, c := range hzChecks {
		if d := diff(h.t, h.pool, c.got, c.want); d != "" {
			out = append(out, c.got+": "+d)
		}
	}
	return strings.Join(out, "\n")
}

// waitFor polls cond until it holds (true) or 30 s pass (false).
func (h *hzEnv) waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

func (h *hzEnv) lockWaiters() bool {
	return count(h.t, h.pool, `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
}

// hazard runs scenario clean (it must end exact) and with plant armed
// (it must diverge: the scenario exposes that fault), each with fan-outs
// re-derived in the page that carried the joined change (the default)
// and with every fan-out staged for a later batch.
func hazard(t *testing.T, plant worker.Plants, scenario func(h *hzEnv) string) {
	for _, mode := range []struct {
		name string
		keys int
	}{{"inline", 0}, {"staged", -1}} {
		t.Run(mode.name+"/clean", func(t *testing.T) {
			if d := scenario(newHzEnv(t, worker.Plants{}, mode.keys)); d != "" {
				t.Fatalf("diverged:\n%s", d)
			}
		})
		t.Run(mode.name+"/planted", func(t *testing.T) {
			d := scenario(newHzEnv(t, plant, mode.keys))
			if d == "" {
				t.Fatal("the planted fault went unnoticed: this test cannot fail")
			}
			t.Logf("planted fault caught as expected:\n%s", d)
		})
	}
}

// A fact re-pointed at a dimension row in the same instant that row is
// updated, fact first: the fact's own re-derive is held (after its read
// would be taken) while the dimension update commits and fans out; both
// must end with the new name. Checked to fail with the dimension read
// before the ledger lock (joinReadEarly): the held re-derive read the old
// name and writes it after the fan-out's re-derive wrote the new one.
func TestJoinHazardFactRepointedAsDimensionChangesFactFirst(t *testing.T) {
	hazard(t, worker.Plants{JoinReadEarly: time.Nanosecond}, func(h *hzEnv) string {
		stage := "locked hz_wide"
		if h.e.w.Plant.JoinReadEarly > 0 {
			stage = "read early hz_wide"
		}
		hd := h.holds.arm(stage)
		exec(h.t, h.pool, `UPDATE hz_ord SET cust_id = 4 WHERE id = 1`) // from customer 2
		hd.await(h.t, stage)
		exec(h.t, h.pool, `UPDATE hz_cust SET name = 'renamed' WHERE id = 4`)
		// The fan-out's re-derive of order 1 either waits for the held
		// page's ledger lock or (a read outside the lock) has written.
		if !h.waitFor(func() bool {
			return h.lockWaiters() || count(h.t, h.pool, `SELECT 1 FROM hz_wide WHERE id = 1 AND cust = 'renamed'`) > 0
		}) {
			hd.release.open()
			h.t.Fatal("the dimension update's re-derive of order 1 neither ran nor waited")
		}
		hd.release.open()
		return h.differs()
	})
}

// The same instant, dimension first: the dimension update's fan-out runs
// (and finds no order pointing at the row yet) and is held before its
// page commits while the fact re-point commits; the fact's own re-derive
// must read the new name. Checked to fail with a root key lost on pages
// (dropEveryNthKey 1 drops the fact's re-derive; the fan-out page, whose
// keys are the dimension's, is not the one held).
func TestJoinHazardFactRepointedAsDimensionChangesDimensionFirst(t *testing.T) {
	hazard(t, worker.Plants{DropEveryNthKey: 1}, func(h *hzEnv) string {
		hd := h.holds.arm("fanned out hz_wide")
		exec(h.t, h.pool, `UPDATE hz_cust SET name = 'renamed' WHERE id = 3`)
		if h.e.w.Plant.DropEveryNthKey == 0 {
			hd.await(h.t, "the dimension update's fan-out")
		}
		exec(h.t, h.pool, `UPDATE hz_ord SET cust_id = 3 WHERE id = 1`)
		if h.e.w.Plant.DropEveryNthKey == 0 && !h.waitFor(func() bool {
			return count(h.t, h.pool, `SELECT 1 FROM hz_wide WHERE id = 1 AND cust = 'renamed'`) > 0
		}) {
			hd.release.open()
			return "order 1's own re-derive, after its re-point, did not read the new name while the fan-out page was held"
		}
		hd.release.open()
		return h.differs()
	})
}

// A dimension row deleted and inserted again with the same key between
// two drains: after the delete drains its orders read NULLs (and leave the
// INNER target), after the insert the new row; then the same within one
// held fan-out. Checked to fail with fan-out of new values only
// (fanOutNewOnly: the deleted row fans out to nothing).
func TestJoinHazardDimensionDeletedAndReinserted(t *testing.T) {
	hazard(t, worker.Plants{FanOutNewOnly: true}, func(h *hzEnv) string {
		exec(h.t, h.pool, `DELETE FROM hz_cust WHERE id = 4`)
		if d := h.differs(); d != "" {
			return "after the delete: " + d
		}
		exec(h.t, h.pool, `INSERT INTO hz_cust VALUES (4, 'back', 2)`)
		if d := h.differs(); d != "" {
			return "after the insert: " + d
		}
		hd := h.holds.arm("fan-out hz_wide")
		exec(h.t, h.pool, `DELETE FROM hz_cust WHERE id = 5`)
		hd.await(h.t, "the delete's fan-out")
		exec(h.t, h.pool, `INSERT INTO hz_cust VALUES (5, 'again', 1)`)
		hd.release.open()
		return h.differs()
	})
}

// A dimension update whose fan-out page runs before the fact insert that
// references the row is sealed: the insert is open while the fan-out runs
// (held after it found nothing), then commits; its own re-derive must read
// the new value. Checked to fail with a root key lost on pages
// (dropEveryNthKey 1).
func TestJoinHazardFanOutBeforeFactInsertSealed(t *testing.T) {
	hazard(t, worker.Plants{DropEveryNthKey: 1}, func(h *hzEnv) string {
		ctx := context.Background()
		fact, err := h.pool.Begin(ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		defer fact.Rollback(ctx)
		exec(h.t, fact, `INSERT INTO hz_ord VALUES (100, 6, 1000)`)
		hd := h.holds.arm("fanned out hz_wide")
		exec(h.t, h.pool, `UPDATE hz_cust SET name = 'renamed' WHERE id = 6`)
		if h.e.w.Plant.DropEveryNthKey == 0 {
			hd.await(h.t, "the dimension update's fan-out")
		}
		if err := fact.Commit(ctx); err != nil {
			h.t.Fatal(err)
		}
		if h.e.w.Plant.DropEveryNthKey == 0 && !h.waitFor(func() bool {
			return count(h.t, h.pool, `SELECT 1 FROM hz_wide WHERE id = 100 AND cust = 'renamed'`) > 0
		}) {
			hd.release.open()
			return "the inserted order's re-derive did not read the new name while the fan-out page was held"
		}
		hd.release.open()
		return h.differs()
	})
}

// A snowflake edge re-pointed (a customer's own region changes) while the
// new region is renamed, with the customer's fan-out held between: the
// orders of that customer must read the new region's new name. Checked to
// fail with the first item's fan-out skipped (fanOutSkipItem 1: the
// customer's change reaches no order).
func TestJoinHazardSnowflakeEdgeRepointed(t *testing.T) {
	hazard(t, worker.Plants{FanOutSkipItem: 1}, func(h *hzEnv) string {
		hd := h.holds.arm("fan-out hz_wide")
		exec(h.t, h.pool, `UPDATE hz_cust SET region_id = 3 WHERE id = 1`)
		hd.await(h.t, "the customer's fan-out")
		exec(h.t, h.pool, `UPDATE hz_region SET name = 'region three, renamed' WHERE id = 3`)
		hd.release.open()
		if d := h.differs(); d != "" {
			return d
		}
		exec(h.t, h.pool, `UPDATE hz_cust SET region_id = NULL WHERE id = 2`)
		return h.differs()
	})
}

// A TRUNCATE of a dimension with root changes pending on both sides of
// it: an order change's page is held before the truncate commits, orders
// change after it, and some customers come back; every target must end
// equal to its join. Checked to fail with the first item's fan-out
// skipped (fanOutSkipItem 1: the truncate re-derives no order).
func TestJoinHazardDimensionTruncatedBetweenRootChanges(t *testing.T) {
	hazard(t, worker.Plants{FanOutSkipItem: 1}, func(h *hzEnv) string {
		hd := h.holds.arm("locked hz_wide")
		exec(h.t, h.pool, `UPDATE hz_ord SET v = v + 1, cust_id = 2 WHERE id IN (1, 2)`)
		hd.await(h.t, "the order change's page")
		exec(h.t, h.pool, `TRUNCATE hz_cust`)
		exec(h.t, h.pool, `UPDATE hz_ord SET cust_id = 3 WHERE id IN (2, 3)`)
		exec(h.t, h.pool, `INSERT INTO hz_cust VALUES (3, 'three again', 1)`)
		hd.release.open()
		return h.differs()
	})
}
