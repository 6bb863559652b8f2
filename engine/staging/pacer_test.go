package staging

import (
	"testing"
	"time"
)

// The seal probe keeps its base spacing while batches come, doubles up to
// the idle spacing once a second of probes found nothing, and a seal or a
// wake-up brings it back to the base at once.
func TestSealPacer(t *testing.T) {
	p := &sealPacer{base: 50 * time.Millisecond, idle: 500 * time.Millisecond}
	for i := 0; i < 19; i++ {
		if d := p.next(sealedNothing); d != 50*time.Millisecond {
			t.Fatalf("probe %d: %v before a second of empty probes", i, d)
		}
	}
	var seen []time.Duration
	for i := 0; i < 6; i++ {
		seen = append(seen, p.next(sealedNothing))
	}
	want := []time.Duration{100, 200, 400, 500, 500, 500}
	for i, w := range want {
		if seen[i] != w*time.Millisecond {
			t.Fatalf("idle spacing %v, want %v ms", seen, want)
		}
	}
	if d := p.next(sealHeld); d != 50*time.Millisecond {
		t.Fatalf("a held seal (busy) spaced %v", d)
	}
	for i := 0; i < 25; i++ {
		p.next(sealedNothing)
	}
	p.wake()
	if d := p.next(sealedBatch); d != 50*time.Millisecond {
		t.Fatalf("after a wake-up: %v", d)
	}
	// An idle spacing below the base never slows the probe below the base.
	q := &sealPacer{base: 50 * time.Millisecond, idle: 10 * time.Millisecond}
	for i := 0; i < 40; i++ {
		if d := q.next(sealedNothing); d != 50*time.Millisecond {
			t.Fatalf("probe %d: %v", i, d)
		}
	}
}
