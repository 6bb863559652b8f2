package proxy

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"
)

// Pauses by cause and column fuses tripped, per transform (issue 17). Both
// are written by SQL in clients' sessions (PAUSE) or by workers of any
// process, so they are counted as the poller sees them: a transform entering
// paused or quarantined, a transform's count of fuse-paused columns going
// up. A pause shorter than the poll interval is not seen (a lower bound,
// like trellis_changes_applied_total). cause is operator, capture_failure,
// halt (the drain paused it) or quarantine.
var (
	descPauses = prometheus.NewDesc("trellis_transform_pauses_total", "Transitions into paused or quarantined seen by this process's poller, by cause.", []string{"transform", "cause"}, nil)
	descFuses  = prometheus.NewDesc("trellis_transform_column_fuses_total", "Columns the column fuse paused, seen by this process's poller.", []string{"transform"}, nil)
)

// countPauses adds the pauses and fuses between prev and cur, and hands
// cur an immutable copy of the totals.
func (p *catalogPoller) countPauses(prev, cur *catalogSnapshot) {
	if p.pauses == nil {
		p.pauses, p.fuses = map[[2]string]float64{}, map[string]float64{}
	}
	if prev != nil {
		old := make(map[string]transformSnap, len(prev.transforms))
		for _, t := range prev.transforms {
			old[t.target] = t
		}
		for _, t := range cur.transforms {
			o, had := old[t.target]
			if !had {
				continue // first seen: no transition observed
			}
			if t.pauseCause != "" && o.pauseCause != t.pauseCause {
				p.pauses[[2]string{t.target, t.pauseCause}]++
			}
			if t.fused > o.fused {
				p.fuses[t.target] += float64(t.fused - o.fused)
			}
		}
	}
	cur.pauses, cur.fuses = maps.Clone(p.pauses), maps.Clone(p.fuses)
}

func (s *catalogSnapshot) collectPauses(ch chan<- prometheus.Metric) {
	for k, v := range s.pauses {
		ch <- prometheus.MustNewConstMetric(descPauses, prometheus.CounterValue, v, k[0], k[1])
	}
	for k, v := range s.fuses {
		ch <- prometheus.MustNewConstMetric(descFuses, prometheus.CounterValue, v, k)
	}
}
