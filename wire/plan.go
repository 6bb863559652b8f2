package wire

// The reply plan: the order in which upstream replies and local units
// reach the client, shared by the two pumps.

import (
	"errors"
	"time"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// planEntry is one element of the reply plan, in client order.
type planEntry struct {
	owed int        // ReadyForQuery frames upstream still owes (upstream entry)
	unit *localUnit // a local unit instead of upstream replies
}

// localUnit is a piece of the client's stream answered by the proxy.
type localUnit struct {
	call  *Call        // a simple Query answered locally
	msgs  []localMsg   // an extended-protocol batch answered locally
	err   *pgerr.Error // answer with this error (then ReadyForQuery when z)
	z     bool
	step  *batchStep   // msgs is a group of a mixed Sync batch (batch.go)
	fatal *pgerr.Error // protocol violation: write it and end the session
	done  chan struct{}
}

// runLocal hands a unit to the server→client pump and waits until it is done;
// false means the session ended meanwhile.
func (s *session) runLocal(u *localUnit) bool {
	if err := s.uw.Flush(); err != nil {
		return false
	}
	u.done = make(chan struct{})
	if !s.enqueueUnit(u) {
		return false
	}
	// While the unit runs, this pump has nothing to read, so it watches the
	// client socket: a client that disconnects cancels the unit (a wait
	// would otherwise run to its timeout for nobody). What a pipelining
	// client sends meanwhile stays buffered for the loop.
	watch := make(chan error, 1)
	go func() {
		_, err := s.cr.Peek(1)
		watch <- err
	}()
	stopWatching := func() {
		s.client.SetReadDeadline(time.Unix(1, 0))
		<-watch
		s.client.SetReadDeadline(time.Time{})
	}
	select {
	case <-u.done:
		stopWatching()
		return true
	case err := <-watch:
		if err != nil && !isTimeout(err) {
			s.clientLeft()
		}
	case <-s.ctx.Done():
		stopWatching()
		return false
	}
	select {
	case <-u.done:
		return true
	case <-s.ctx.Done():
		return false
	}
}

func (s *session) enqueueUnit(u *localUnit) bool {
	s.mu.Lock()
	if s.endingLocked() {
		s.mu.Unlock()
		s.wake()
		return false
	}
	s.plan = append(s.plan, &planEntry{unit: u})
	front := len(s.plan) == 1
	s.mu.Unlock()
	if front {
		s.wake()
	}
	return true
}

// enqueueFatal ends the session at the next frame boundary with a FATAL
// (a client protocol violation): it jumps the queue, because replies still
// owed by upstream may never come for a stream it could not parse.
func (s *session) enqueueFatal(e *pgerr.Error) {
	s.mu.Lock()
	s.plan = append([]*planEntry{{unit: &localUnit{fatal: e}}}, s.plan...)
	s.mu.Unlock()
	s.wake()
}

// addDebt accounts n ReadyForQuery frames upstream will owe for frames about
// to be written. It returns false, and the caller must write nothing, once a
// shutdown found the session idle: a statement the client sends after that
// must not start (Shutdown ends idle sessions at once), and the check shares
// the lock with the server→client pump's idle check, so a statement is either
// accounted before the pump ends the session or refused.
func (s *session) addDebt(n int) bool {
	s.mu.Lock()
	if s.endingLocked() {
		s.mu.Unlock()
		s.wake()
		return false
	}
	if k := len(s.plan); k > 0 && s.plan[k-1].unit == nil {
		s.plan[k-1].owed += n
	} else {
		// Reuse the entry the last paid debt left, so a round trip
		// allocates nothing here.
		e := s.spare
		if e == nil {
			e = &planEntry{}
		}
		s.spare = nil
		e.owed = n
		s.plan = append(s.plan, e)
	}
	s.mu.Unlock()
	return true
}

// popFront drops the plan's first entry (callers hold s.mu); an emptied
// plan goes back to the start of its array, so appends reuse it.
func (s *session) popFront() {
	s.plan[0] = nil
	s.plan = s.plan[1:]
	if len(s.plan) == 0 {
		s.plan = s.planBuf[:0]
	}
}

// endingLocked reports that shutdown ends the session now: forced, or
// graceful with nothing owed and no transaction open. Callers hold s.mu.
func (s *session) endingLocked() bool {
	return s.shutdown == 2 || s.shutdown == 1 && len(s.plan) == 0 && s.info.TxStatus() == 'I'
}

func (s *session) subDebt(n int) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	if k := len(s.plan); k > 0 && s.plan[k-1].unit == nil {
		e := s.plan[k-1]
		e.owed -= n
		if e.owed <= 0 {
			s.plan = s.plan[:k-1]
		}
	}
	s.mu.Unlock()
}

// payDebt accounts one relayed ReadyForQuery.
func (s *session) payDebt() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.plan) == 0 || s.plan[0].unit != nil {
		return
	}
	e := s.plan[0]
	e.owed--
	if e.owed <= 0 {
		s.popFront()
		s.spare = e
	}
}

// runPlanFront runs local units that reached the front of the plan and
// handles shutdown; end reports that the session is over.
func (s *session) runPlanFront() (outcome string, end bool) {
	for {
		s.mu.Lock()
		var front *planEntry
		if len(s.plan) > 0 {
			front = s.plan[0]
		}
		ending := s.endingLocked()
		s.mu.Unlock()
		if front == nil || front.unit == nil {
			if ending {
				s.cw.Write(encodeError(s.wbuf[:0], fatal(pgerr.AdminShutdown, "terminating connection due to administrator command"), false, nil))
				s.cw.Flush()
				return "shutdown", true
			}
			return "", false
		}
		u := front.unit
		err := s.runUnit(u)
		s.mu.Lock()
		if len(s.plan) > 0 && s.plan[0] == front {
			s.popFront()
		}
		s.mu.Unlock()
		if u.done != nil {
			close(u.done)
		}
		if err != nil {
			s.cw.Flush()
			if u.fatal != nil {
				return "client_error", true
			}
			if errors.Is(err, errClientWrite) {
				return "client_gone", true
			}
			return s.upstreamLost(err), true
		}
		if err := s.cw.Flush(); err != nil {
			return "client_gone", true
		}
	}
}
