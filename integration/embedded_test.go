package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

// syncBuffer is a bytes.Buffer safe for the proxy goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestEmbedded runs the embedded default (D12): a private cluster on a Unix
// socket, the psql line on stdout, the cluster stopped on exit.
func TestEmbedded(t *testing.T) {
	cfg := proxy.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Ephemeral = true
	cfg.HTTPListen = "127.0.0.1:0"
	var stdout syncBuffer
	ready := make(chan proxy.Info, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- proxy.Run(ctx, cfg, proxy.Options{Stdout: &stdout, Ready: func(i proxy.Info) { ready <- i },
			Logger: testLogger(t)})
	}()
	var info proxy.Info
	select {
	case info = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("embedded proxy not ready")
	}
	want := fmt.Sprintf("psql \"postgres://postgres@%s/postgres\"\n", info.Addr)
	if stdout.String() != want {
		t.Fatalf("stdout %q, want %q", stdout.String(), want)
	}
	if info.Cluster == nil || info.Cluster.TCP {
		t.Fatal("embedded cluster should listen on its socket only")
	}
	conn := connectURL(t, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", info.Addr))
	var v string
	if err := conn.QueryRow(t.Context(), "show server_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	// /readyz also waits for the staging worker to take its lock.
	for path, want := range map[string]string{"/livez": "ok", "/readyz": "ok", "/metrics": `trellis_proxy_client_sessions{trellis_instance="postgres/trellis"} 1`} {
		var code int
		var body []byte
		eventually(t, 30*time.Second, path, func() bool {
			resp, err := http.Get("http://" + info.HTTPAddr.String() + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
			return code == 200 && strings.Contains(string(body), want)
		})
	}
	conn.Close(t.Context())
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return")
	}
	if _, err := os.Stat(info.Cluster.DataDir); !os.IsNotExist(err) {
		t.Fatalf("ephemeral data directory %s left behind (%v)", info.Cluster.DataDir, err)
	}
}
