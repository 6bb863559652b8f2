package worker

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

// WorkerStates are the states of a process's workers.
type WorkerStates struct {
	mu sync.Mutex
	m  map[string]*WorkerState
}

// Set records a worker's state; Since moves only when the state changes.
func (w *WorkerStates) Set(id, kind, state string) {
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

// Working records that a registered worker took on a piece of work (a page
// or a build task it just claimed): its state and what the work is. An id
// Run did not register (a test calling a step directly) is not listed.
func (w *WorkerStates) Working(id, state, detail string) {
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

func (w *WorkerStates) Clear() {
	w.mu.Lock()
	w.m = nil
	w.mu.Unlock()
}

func (e *Env) StagingWorkerID() string { return e.Cfg.ProcessID + "/staging" }

// List returns the states, staging first, then drain workers by id.
func (w *WorkerStates) List() []WorkerState {
	w.mu.Lock()
	out := make([]WorkerState, 0, len(w.m))
	for _, s := range w.m {
		out = append(out, *s)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind == "staging"
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Holding reports whether worker id is in state "holding".
func (w *WorkerStates) Holding(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.m[id]
	return s != nil && s.State == "holding"
}
