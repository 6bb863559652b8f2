package worker

import (
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{SealInterval: 20 * time.Millisecond}
	c.Defaults()
	if c.Schema != "trellis" || c.TargetSchema != "public" || c.Staging != StagingAuto || c.DrainWorkers != 2 {
		t.Fatalf("defaults: %+v", c)
	}
	if c.SealIdleInterval != 200*time.Millisecond {
		t.Errorf("idle interval %v, want 10 x the seal interval set", c.SealIdleInterval)
	}
	if c.FreshChunkSize != 10*c.BuildChunkSize || c.PageSize != 5000 || c.Logger == nil {
		t.Errorf("sizes: fresh %d build %d page %d", c.FreshChunkSize, c.BuildChunkSize, c.PageSize)
	}
	// A negative count means no drain workers, and stays.
	n := Config{DrainWorkers: -1}
	n.Defaults()
	if n.DrainWorkers != -1 {
		t.Errorf("DrainWorkers -1 became %d", n.DrainWorkers)
	}
}

func TestWorkerStates(t *testing.T) {
	var w WorkerStates
	w.Working("unregistered", "draining", "x") // a test's direct call: not listed
	if len(w.List()) != 0 {
		t.Fatal("an unregistered worker was listed")
	}
	w.Set("p/drain-1", "drain", "idle")
	w.Set("p/staging", "staging", "standby")
	w.Set("p/drain-0", "drain", "idle")
	first := w.List()[0].Since
	w.Set("p/staging", "staging", "standby") // same state: Since stays
	if got := w.List(); got[0].ID != "p/staging" || got[1].ID != "p/drain-0" || got[2].ID != "p/drain-1" || !got[0].Since.Equal(first) {
		t.Fatalf("order or Since: %+v", got)
	}
	if w.Holding("p/staging") {
		t.Fatal("standby reported as holding")
	}
	w.Set("p/staging", "staging", "holding")
	w.Working("p/drain-0", "draining", "batch 3 bucket 1")
	if !w.Holding("p/staging") {
		t.Fatal("holding not reported")
	}
	if d := w.List()[1]; d.State != "draining" || d.Detail != "batch 3 bucket 1" {
		t.Fatalf("drain-0: %+v", d)
	}
	w.Clear()
	if len(w.List()) != 0 || w.Holding("p/staging") {
		t.Fatal("Clear left states")
	}
}

func TestPokeNeverBlocks(t *testing.T) {
	c := make(chan struct{}, 1)
	Poke(c)
	Poke(c) // full: dropped, not blocked
	if len(c) != 1 {
		t.Fatalf("%d wake-ups queued, want 1", len(c))
	}
}

func TestDrainedSignalWakesEveryWaiter(t *testing.T) {
	e := NewEnv(Config{}, nil, nil)
	a, b := e.DrainedCh(), e.DrainedCh()
	e.SignalDrained()
	for _, ch := range []<-chan struct{}{a, b} {
		select {
		case <-ch:
		default:
			t.Fatal("a waiter was not woken")
		}
	}
	select {
	case <-e.DrainedCh():
		t.Fatal("the next signal's channel is already closed")
	default:
	}
}

func TestWorkerRoleAndNames(t *testing.T) {
	e := NewEnv(Config{Schema: "tr", ProcessID: "p1"}, nil, nil)
	if e.WorkerRole() != "" {
		t.Fatal("role before Run")
	}
	e.SetWorkerRole("w")
	if e.WorkerRole() != "w" || e.StagingWorkerID() != "p1/staging" {
		t.Fatalf("role %q, id %q", e.WorkerRole(), e.StagingWorkerID())
	}
	if got := e.Tbl("_batches"); got != `"tr"."_batches"` {
		t.Errorf("Tbl: %s", got)
	}
	if got := e.TryFencesSQL("$1", true); got != `"tr"._try_fences($1, true)` {
		t.Errorf("TryFencesSQL: %s", got)
	}
}
