package engine

import (
	"sort"
	"sync"
	"time"
)

// WorkerState is what one worker of this process is doing, for the
// proxy-answered trellis.proxy_workers (surface §11.1). It lives in memory
// only: it describes this process, not the fleet.
type WorkerState struct {
	ID, Kind, State string // kind staging|drain; state standby|holding|idle|draining|building|checking
	Since           time.Time
	// Detail is the work in hand, or the last done while the state stays
	// (a page's "batch 1842 bucket 3", a build's "public.t chunk");
	// empty when idle or waiting.
	Detail string
}

type workerStates struct {
	mu sync.Mutex
	m  map[string]*WorkerState
}

// set records a worker's state; Since moves only when the state changes.
func (w *workerStates) set(id, kind, state string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*WorkerState{}
	}
	if s := w.m[id]; s != nil && s.State == state {
		return
	}
	w.m[id] = &WorkerState{ID: id, Kind: kind, State: state, Since: time.Now()}
}

// working records that a registered worker took on a piece of work (a page
// or a build task it just claimed): its state and what the work is. An id
// Run did not register (a test calling a step directly) is not listed.
func (w *workerStates) working(id, state, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.m[id]
	if s == nil {
		return
	}
	if s.State != state {
		s = &WorkerState{ID: id, Kind: s.Kind, State: state, Since: time.Now()}
		w.m[id] = s
	}
	s.Detail = detail
}

func (w *workerStates) clear() {
	w.mu.Lock()
	w.m = nil
	w.mu.Unlock()
}

// Workers returns the states of this process's workers, staging first,
// then drain workers by id; empty while Run is not running.
func (e *Engine) Workers() []WorkerState {
	e.states.mu.Lock()
	out := make([]WorkerState, 0, len(e.states.m))
	for _, s := range e.states.m {
		out = append(out, *s)
	}
	e.states.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind == "staging"
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// StagingHeld reports whether this process holds the staging role now.
func (e *Engine) StagingHeld() bool {
	e.states.mu.Lock()
	defer e.states.mu.Unlock()
	s := e.states.m[e.stagingWorkerID()]
	return s != nil && s.State == "holding"
}

func (e *Engine) stagingWorkerID() string { return e.cfg.ProcessID + "/staging" }
