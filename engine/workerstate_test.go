package engine

import (
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"
)

// trellis.proxy_workers' detail: a drain worker shows the build task it
// runs (target and task kind) and the page it holds (batch and bucket),
// and nothing once it is idle again.
func TestWorkersReportTheirWork(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE ws (id int PRIMARY KEY, v int)`)
	exec(t, pool, `INSERT INTO ws SELECT x, x FROM generate_series(1, 200) x`)

	// The first build task and the first page wait inside the hook until
	// the test has read the workers' states.
	var buildOnce, pageOnce sync.Once
	atBuild, atPage := make(chan struct{}), make(chan struct{})
	buildGate, pageGate := newGate(), newGate()
	e := New(pool, fastConfig())
	e.w.Plant.PageHook = func(stage string) {
		switch stage {
		case "build-task plan", "build-task chunk", "build-task sweep", "build-task groups", "build-task refresh":
			buildOnce.Do(func() { close(atBuild); buildGate.wait() })
		case "before-commit":
			pageOnce.Do(func() { close(atPage); pageGate.wait() })
		}
	}
	runHooked(t, e, buildGate, pageGate)
	wait := func(ch chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(60 * time.Second):
			t.Fatalf("no %s started", what)
		}
	}
	working := func(state string, detail *regexp.Regexp) string {
		t.Helper()
		var all []WorkerState
		for _, w := range e.Workers() {
			all = append(all, w)
			if w.Kind == "drain" && w.State == state && detail.MatchString(w.Detail) {
				return w.Detail
			}
		}
		t.Fatalf("no drain worker %s with a detail matching %s: %+v", state, detail, all)
		return ""
	}

	define(t, e, Spec{Target: TableName{Name: "wt"}, Source: TableName{Name: "ws"}, Fields: []Field{{Name: "w", Expr: col("v")}}})
	wait(atBuild, "build task")
	working("building", regexp.MustCompile(`^public\.wt (plan|chunk|sweep|refresh)$`))
	buildGate.open()
	awaitLive(t, e, "wt")

	exec(t, pool, `UPDATE ws SET v = v + 1 WHERE id <= 10`)
	wait(atPage, "page")
	detail := working("draining", regexp.MustCompile(`^batch \d+ bucket \d+$`))
	var batch, bucket int64
	if _, err := fmt.Sscanf(detail, "batch %d bucket %d", &batch, &bucket); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, fmt.Sprintf(`SELECT 1 FROM trellis._batch_buckets WHERE batch_seq = %d AND bucket = %d AND state = 'open'`, batch, bucket)); n != 1 {
		t.Fatalf("%s: the bucket is not the open one the page holds", detail)
	}
	pageGate.open()
	converge(t, e)
	assertSame(t, pool, `SELECT id, w FROM wt`, `SELECT id, v FROM ws`)
	for deadline := time.Now().Add(30 * time.Second); ; {
		idle := true
		for _, w := range e.Workers() {
			if w.Kind == "drain" && (w.State != "idle" || w.Detail != "") {
				idle = false
			}
		}
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers not idle with an empty detail: %+v", e.Workers())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
