package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// pgbenchMode is one pgbench workload of B1.
type pgbenchMode struct {
	Name string
	Args []string
	// Vacuum: let pgbench vacuum and truncate history before the run. Only
	// TPC-B writes; the select-only runs skip it (-n) to save time.
	Vacuum bool
	// Writes: the TPC-B balance invariant is checked after the run.
	Writes bool
}

var pgbenchModes = []pgbenchMode{
	{Name: "select-simple", Args: []string{"-S", "-M", "simple"}},
	{Name: "select-extended", Args: []string{"-S", "-M", "extended"}},
	{Name: "select-prepared", Args: []string{"-S", "-M", "prepared"}},
	{Name: "tpcb", Args: []string{"-M", "simple"}, Vacuum: true, Writes: true},
	// Not in the default set: a new connection per transaction (-C).
	{Name: "connect", Args: []string{"-S", "-M", "simple", "-C"}},
}

func modeByName(name string) (pgbenchMode, bool) {
	for _, m := range pgbenchModes {
		if m.Name == name {
			return m, true
		}
	}
	return pgbenchMode{}, false
}

// pgbenchResult is what one pgbench run reports.
type pgbenchResult struct {
	TPS        float64
	Processed  int64
	Failed     int64
	LatencyAvg float64 // ms, pgbench's own average
	P50, P99   float64 // ms, from the sampled per-transaction log; NaN if none
	Samples    int
}

// runPgbench runs one pgbench cell against dsn (a URI, which pgbench expands
// as its dbname argument) and parses its report.
func runPgbench(ctx context.Context, bin, dsn string, mode pgbenchMode, clients int, dur time.Duration, sampling float64, logDir string) (pgbenchResult, error) {
	jobs := min(clients, 2) // the spec's -j 2; pgbench refuses more threads than clients
	args := append([]string{}, mode.Args...)
	args = append(args, "-c", strconv.Itoa(clients), "-j", strconv.Itoa(jobs),
		"-T", strconv.Itoa(max(1, int(dur.Round(time.Second)/time.Second))))
	if !mode.Vacuum {
		args = append(args, "-n")
	}
	prefix := ""
	if sampling > 0 && logDir != "" {
		prefix = filepath.Join(logDir, fmt.Sprintf("pgb%d", time.Now().UnixNano()))
		args = append(args, "-l", "--log-prefix="+prefix, "--sampling-rate="+strconv.FormatFloat(sampling, 'f', -1, 64))
	}
	args = append(args, dsn)
	cmd := exec.CommandContext(ctx, bin, args...)
	if logDir != "" {
		cmd.Dir = logDir
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res, perr := parsePgbench(stdout.String())
	if err != nil {
		return res, fmt.Errorf("pgbench %s: %v: %s", strings.Join(args[:len(args)-1], " "), err, lastLines(stderr.String()+stdout.String(), 5))
	}
	if perr != nil {
		return res, fmt.Errorf("pgbench %s: %v: %s", strings.Join(args[:len(args)-1], " "), perr, lastLines(stdout.String(), 5))
	}
	res.P50, res.P99 = math.NaN(), math.NaN()
	if prefix != "" {
		lat, err := readPgbenchLogs(prefix)
		if err != nil {
			return res, err
		}
		res.Samples = len(lat)
		if len(lat) > 0 {
			res.P50, res.P99 = percentile(lat, 50), percentile(lat, 99)
		}
	}
	return res, nil
}

// parsePgbench reads pgbench's summary. A run with failed transactions or an
// abort is an error: the benchmark measured something other than B1.
func parsePgbench(out string) (pgbenchResult, error) {
	r := pgbenchResult{TPS: math.NaN(), LatencyAvg: math.NaN(), P50: math.NaN(), P99: math.NaN()}
	s := bufio.NewScanner(strings.NewReader(out))
	haveTPS := false
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		switch {
		case strings.HasPrefix(line, "tps = "):
			// "tps = 1234.5 (without initial connection time)"
			f := strings.Fields(line)
			if len(f) >= 3 {
				v, err := strconv.ParseFloat(f[2], 64)
				if err == nil {
					r.TPS, haveTPS = v, true
				}
			}
		case strings.HasPrefix(line, "number of transactions actually processed:"):
			f := strings.Fields(strings.TrimPrefix(line, "number of transactions actually processed:"))
			if len(f) > 0 {
				// "123/456" when -t was used; the first number is what ran.
				n, _, _ := strings.Cut(f[0], "/")
				r.Processed, _ = strconv.ParseInt(n, 10, 64)
			}
		case strings.HasPrefix(line, "number of failed transactions:"):
			f := strings.Fields(strings.TrimPrefix(line, "number of failed transactions:"))
			if len(f) > 0 {
				r.Failed, _ = strconv.ParseInt(f[0], 10, 64)
			}
		case strings.HasPrefix(line, "latency average = "):
			f := strings.Fields(line)
			if len(f) >= 4 {
				r.LatencyAvg, _ = strconv.ParseFloat(f[3], 64)
			}
		}
	}
	switch {
	case !haveTPS:
		return r, fmt.Errorf("no tps line in pgbench output")
	case r.Failed > 0:
		return r, fmt.Errorf("%d failed transactions", r.Failed)
	case r.Processed == 0:
		return r, fmt.Errorf("no transactions processed")
	}
	return r, nil
}

// readPgbenchLogs reads the per-transaction logs written under prefix (one
// file per thread: prefix.PID, prefix.PID.N) and returns the latencies in ms,
// removing the files.
func readPgbenchLogs(prefix string) ([]float64, error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil {
		return nil, err
	}
	var lat []float64
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		lat = append(lat, parsePgbenchLog(string(b))...)
		os.Remove(name)
	}
	return lat, nil
}

// parsePgbenchLog parses "client_id transaction_no time script_no time_epoch
// time_us [lag]" lines; time is the transaction's latency in µs.
func parsePgbenchLog(text string) []float64 {
	var lat []float64
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		us, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		lat = append(lat, us/1000)
	}
	return lat
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
