package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"time"
)

// point is one measured run of one shape on one path.
type point struct {
	Value    float64 // the throughput figure the ratios use (TPS or bytes/s); NaN if the run failed
	P50, P99 float64 // latency in ms where there is one, else NaN
	Fields   map[string]any
	Err      error
}

// repPoints are the runs of one shape in one repetition.
type repPoints struct {
	Head, Tail point
	Variants   map[string]point
}

// shapeSpec is one shape (workload × size) of a scenario. run measures it
// once on a path.
type shapeSpec struct {
	Name  string
	Unit  string // of Value, for the table: "tps", "MB/s"
	Scale float64
	run   func(ctx context.Context, path string) point
}

// runner drives the interleaved schedule of §1.2 over a set of shapes.
type runner struct {
	scenario string
	control  string   // the control path, "direct"
	variants []string // the compared paths, rotated per repetition
	reps     int
	wait     time.Duration
	out      *emitter
	failures int // runs that returned an error
}

// run executes reps × shapes × schedule and returns the points per shape.
// Repetitions are the outer loop so that a drift over the whole run touches
// every shape's repetitions alike.
func (r *runner) run(ctx context.Context, shapes []shapeSpec) map[string][]repPoints {
	res := map[string][]repPoints{}
	for rep := range r.reps {
		for _, sh := range shapes {
			rp := repPoints{Variants: map[string]point{}}
			order := schedule(rep, r.control, r.variants)
			for pos, path := range order {
				if ctx.Err() != nil {
					return res
				}
				p := sh.run(ctx, path)
				if p.Fields == nil {
					p.Fields = map[string]any{}
				}
				// Read right after the run: the load it ran under.
				p.Fields["loadavg_1m"] = loadAvg()
				head := pos == 0
				switch {
				case head:
					rp.Head = p
				case pos == len(order)-1:
					rp.Tail = p
				default:
					rp.Variants[path] = p
				}
				fields := map[string]any{
					"scenario": r.scenario, "variant": path, "path": path, "shape": sh.Name,
					"rep": rep + 1, "position": pos + 1,
				}
				if !head && path != r.control {
					fields["share_of_control"] = ratio(p.Value, rp.Head.Value)
				}
				for k, v := range p.Fields {
					fields[k] = v
				}
				if p.Err != nil {
					r.failures++
					fields["error"] = p.Err.Error()
					fmt.Fprintf(os.Stderr, "  %-22s rep %d %-9s FAILED: %v\n", sh.Name, rep+1, path, p.Err)
				} else {
					fmt.Fprintf(os.Stderr, "  %-22s rep %d %-9s %10s %s\n", sh.Name, rep+1, path, fmtNum(p.Value/sh.scale(), 1), sh.Unit)
				}
				r.out.emit(fields)
				if r.wait > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(r.wait):
					}
				}
			}
			res[sh.Name] = append(res[sh.Name], rp)
		}
	}
	return res
}

func (s shapeSpec) scale() float64 {
	if s.Scale == 0 {
		return 1
	}
	return s.Scale
}

// summary is a shape's result over its repetitions: medians and same-run
// ratios.
type summary struct {
	Median     map[string]float64 // path → median Value (the control: median of per-rep head/tail means)
	MedianP50  map[string]float64 // path → median p50 latency
	ToControl  map[string]float64 // variant → median over reps of variant / that rep's control
	ProxyToBnc float64            // median over reps of proxy / pgbouncer
	Drift      float64            // median head→tail drift of the control
	MaxDrift   float64            // the largest |drift| seen
	CPU        map[string]float64 // forwarder path → median CPU µs per transaction or row (filled by report)
	Reps       int
}

// summarise reduces the repetitions of one shape. Ratios are taken inside
// each repetition and then summarised by their median (§1.1), rather than
// being a ratio of medians taken at different times.
func summarise(reps []repPoints, ctlPath string, variants []string) summary {
	s := summary{
		Median: map[string]float64{}, MedianP50: map[string]float64{}, ToControl: map[string]float64{},
		Reps: len(reps),
	}
	var ctl, ctlP50, drifts []float64
	vals := map[string][]float64{}
	p50s := map[string][]float64{}
	ratios := map[string][]float64{}
	var pxb []float64
	for _, rp := range reps {
		c := control(rp.Head.Value, rp.Tail.Value)
		ctl = appendNum(ctl, c)
		ctlP50 = appendNum(ctlP50, control(rp.Head.P50, rp.Tail.P50))
		drifts = appendNum(drifts, drift(rp.Head.Value, rp.Tail.Value))
		for _, v := range variants {
			p, ok := rp.Variants[v]
			if !ok {
				continue
			}
			vals[v] = appendNum(vals[v], p.Value)
			p50s[v] = appendNum(p50s[v], p.P50)
			ratios[v] = appendNum(ratios[v], ratio(p.Value, c))
		}
		if px, ok := rp.Variants[pathProxy]; ok {
			if b, ok := rp.Variants[pathBouncer]; ok {
				pxb = appendNum(pxb, ratio(px.Value, b.Value))
			}
		}
	}
	s.Median[ctlPath] = median(ctl)
	s.MedianP50[ctlPath] = median(ctlP50)
	for _, v := range variants {
		s.Median[v] = median(vals[v])
		s.MedianP50[v] = median(p50s[v])
		s.ToControl[v] = median(ratios[v])
	}
	s.ProxyToBnc = median(pxb)
	s.Drift = median(drifts)
	s.MaxDrift = math.NaN()
	for _, d := range drifts {
		if math.IsNaN(s.MaxDrift) || math.Abs(d) > math.Abs(s.MaxDrift) {
			s.MaxDrift = d
		}
	}
	return s
}

// appendNum appends x unless it is NaN, so failed runs do not poison medians.
func appendNum(xs []float64, x float64) []float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return xs
	}
	return append(xs, x)
}
