package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/PID/stat; 100 on
// every Linux platform Go supports.
const clockTicks = 100

// procStatus reads the given fields (in kB) from /proc/PID/status, e.g.
// VmRSS and VmHWM.
func procStatus(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseStatus(bufio.NewScanner(f))
}

func parseStatus(s *bufio.Scanner) (map[string]int64, error) {
	out := map[string]int64{}
	for s.Scan() {
		key, rest, ok := strings.Cut(s.Text(), ":")
		if !ok || !strings.HasPrefix(key, "Vm") && !strings.HasPrefix(key, "Rss") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		out[key] = n
	}
	return out, s.Err()
}

// rssKB is the resident set of a process in kB.
func rssKB(pid int) (int64, error) {
	st, err := procStatus(pid)
	if err != nil {
		return 0, err
	}
	v, ok := st["VmRSS"]
	if !ok {
		return 0, fmt.Errorf("no VmRSS for pid %d", pid)
	}
	return v, nil
}

// cpuTicks is utime+stime of a process in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatTicks(string(b))
}

// parseStatTicks extracts utime+stime from a /proc/PID/stat line. The comm
// field is parenthesised and may hold spaces, so fields are counted from the
// last ')'.
func parseStatTicks(line string) (int64, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat line")
	}
	f := strings.Fields(line[i+1:])
	// After comm: state(3) ... utime is field 14, stime 15 (1-based), so
	// indexes 11 and 12 here.
	if len(f) < 13 {
		return 0, fmt.Errorf("short stat line")
	}
	u, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, err
	}
	s, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return u + s, nil
}

// fsType returns the mount point and filesystem type holding path, from
// /proc/self/mounts (longest matching mount point wins).
func fsType(path string) (mount, typ string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", ""
	}
	return fsTypeFrom(string(b), path)
}

func fsTypeFrom(mounts, path string) (mount, typ string) {
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/") {
			if len(mp) >= len(mount) {
				mount, typ = mp, f[2]
			}
		}
	}
	return mount, typ
}
