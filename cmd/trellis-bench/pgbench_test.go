package main

import (
	"math"
	"strings"
	"testing"
)

const pgbenchOut = `pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: select only>
scaling factor: 5
query mode: extended
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 1 s
number of transactions actually processed: 42380
number of failed transactions: 0 (0.000%)
latency average = 0.170 ms
initial connection time = 11.524 ms
tps = 47012.345678 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	r, err := parsePgbench(pgbenchOut)
	if err != nil {
		t.Fatal(err)
	}
	if r.TPS != 47012.345678 || r.Processed != 42380 || r.Failed != 0 || r.LatencyAvg != 0.170 {
		t.Errorf("parsed %+v", r)
	}
}

func TestParsePgbenchRejects(t *testing.T) {
	failed := strings.Replace(pgbenchOut, "failed transactions: 0 (0.000%)", "failed transactions: 3 (0.007%)", 1)
	if _, err := parsePgbench(failed); err == nil {
		t.Error("failed transactions must fail the run")
	}
	if _, err := parsePgbench("pgbench: error: connection to server failed\n"); err == nil {
		t.Error("output without tps must fail")
	}
	none := strings.Replace(pgbenchOut, "processed: 42380", "processed: 0", 1)
	if _, err := parsePgbench(none); err == nil {
		t.Error("zero transactions must fail")
	}
}

func TestParsePgbenchLog(t *testing.T) {
	log := "0 1 120 0 1764423000 123456\n0 2 95 0 1764423000 123789\n\ngarbage\n1 1 2000 0 1764423001 5 0\n"
	got := parsePgbenchLog(log)
	want := []float64{0.120, 0.095, 2.0}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("latency %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestModes(t *testing.T) {
	c := config{Modes: "select-extended, tpcb", Clients: "1,8", Profile: "quick"}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	m, _ := c.modeList()
	if len(m) != 2 || m[0].Name != "select-extended" || !m[1].Writes {
		t.Errorf("modes %+v", m)
	}
	if c.Reps != 3 || c.Duration.Seconds() != 5 {
		t.Errorf("quick profile defaults: reps %d duration %s", c.Reps, c.Duration)
	}
	for _, bad := range []config{
		{Modes: "select-fast", Clients: "1", Profile: "quick"},
		{Modes: "tpcb", Clients: "0", Profile: "quick"},
		{Modes: "tpcb", Clients: "1", Profile: "slow"},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
	q := config{Quick: true, Modes: "tpcb", Clients: "1", Profile: "quick"}
	if err := q.defaults(); err != nil || q.Reps != 1 || q.IdleConns != 100 {
		t.Errorf("smoke defaults: %v %+v", err, q)
	}
}
