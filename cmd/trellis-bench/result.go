package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// emitter writes result lines (§2.5): one JSON object per measurement point on
// stdout, and also to --out when given. Every line carries the environment.
type emitter struct {
	mu  sync.Mutex
	env map[string]any
	ws  []io.Writer
}

func (e *emitter) emit(fields map[string]any) {
	line := make(map[string]any, len(fields)+len(e.env)+1)
	for k, v := range e.env {
		line[k] = v
	}
	for k, v := range fields {
		if f, ok := v.(float64); ok {
			v = nullable(f)
		}
		line[k] = v
	}
	line["time"] = time.Now().UTC().Format(time.RFC3339)
	// The 1-minute load average: other work on a shared box shows up here.
	if _, ok := line["loadavg_1m"]; !ok {
		line["loadavg_1m"] = nullable(loadAvg())
	}
	b, err := json.Marshal(line)
	if err != nil {
		fmt.Fprintf(os.Stderr, "trellis-bench: encoding result line: %v\n", err)
		return
	}
	b = append(b, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.ws {
		w.Write(b)
	}
}

// loadAvg is the 1-minute load average, NaN when unknown.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// table renders rows for people on stderr, aligned, or as Markdown (for
// docs/benchmarks.md).
type table struct {
	header   []string
	rows     [][]string
	markdown bool
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	if t.markdown {
		fmt.Fprintln(w, "| "+strings.Join(t.header, " | ")+" |")
		fmt.Fprintln(w, strings.Repeat("|---", len(t.header))+"|")
		for _, r := range t.rows {
			fmt.Fprintln(w, "| "+strings.Join(r, " | ")+" |")
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// fmtNum formats a figure for the table, "-" when missing.
func fmtNum(x float64, prec int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// fmtRatio formats a ratio as "0.87×".
func fmtRatio(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f×", x)
}

// fmtPct formats a fraction as a signed percentage, e.g. drift "+3.1%".
func fmtPct(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*x)
}
