package main

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

func TestParseStatTicks(t *testing.T) {
	// comm with spaces and parentheses, as a process may name itself.
	line := "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 37 0 0 20 0 4 0 100 0 0"
	got, err := parseStatTicks(line)
	if err != nil || got != 287 {
		t.Errorf("got %d, %v; want 287", got, err)
	}
	if _, err := parseStatTicks("garbage"); err == nil {
		t.Error("malformed line accepted")
	}
}

func TestParseStatus(t *testing.T) {
	in := "Name:\tpgbouncer\nVmPeak:\t   20000 kB\nVmHWM:\t    9000 kB\nVmRSS:\t    8584 kB\nThreads:\t1\n"
	st, err := parseStatus(bufio.NewScanner(strings.NewReader(in)))
	if err != nil || st["VmRSS"] != 8584 || st["VmHWM"] != 9000 {
		t.Errorf("got %v, %v", st, err)
	}
	if _, ok := st["Threads"]; ok {
		t.Error("non-memory field parsed")
	}
}

func TestOwnRSS(t *testing.T) {
	kb, err := rssKB(os.Getpid())
	if err != nil || kb <= 0 {
		t.Errorf("rssKB(self) = %d, %v", kb, err)
	}
	if _, err := cpuTicks(os.Getpid()); err != nil {
		t.Error(err)
	}
}

func TestFsTypeFrom(t *testing.T) {
	mounts := "/dev/vda / ext4 rw 0 0\ntmpfs /dev/shm tmpfs rw 0 0\ntmpfs /dev/shmx tmpfs rw 0 0\n"
	for path, want := range map[string]string{
		"/dev/shm/trellis-bench-1/pgdata": "tmpfs",
		"/dev/shm":                        "tmpfs",
		"/dev/shmother/x":                 "ext4", // a prefix of the name is not a parent
		"/work/data":                      "ext4",
	} {
		if _, typ := fsTypeFrom(mounts, path); typ != want {
			t.Errorf("fsTypeFrom(%s) = %s, want %s", path, typ, want)
		}
	}
}
