package integration

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// selfSigned writes a self-signed certificate and key for 127.0.0.1 into dir.
func selfSigned(t testing.TB, dir string, uid, gid int) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	if uid >= 0 {
		os.Chown(certFile, uid, gid)
		os.Chown(keyFile, uid, gid)
	}
	return certFile, keyFile
}

func TestClientTLS(t *testing.T) {
	cert, key := selfSigned(t, t.TempDir(), -1, -1)
	h := start(t, func(c *proxyConfig, _ *proxyOptions) { c.TLSCert, c.TLSKey = cert, key })
	conn := connectURL(t, strings.Replace(h.url("postgres", "", "postgres", ""), "sslmode=disable", "sslmode=require", 1))
	if _, ok := conn.PgConn().Conn().(*tls.Conn); !ok {
		t.Fatalf("client leg is %T, not TLS", conn.PgConn().Conn())
	}
	var one int
	if err := conn.QueryRow(t.Context(), "select 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	// PG17's direct TLS: a ClientHello first, with ALPN "postgresql".
	directTLS := connectURL(t, strings.Replace(h.url("postgres", "", "postgres", ""), "sslmode=disable", "sslmode=require&sslnegotiation=direct", 1))
	if _, ok := directTLS.PgConn().Conn().(*tls.Conn); !ok {
		t.Fatalf("direct TLS leg is %T", directTLS.PgConn().Conn())
	}
	if err := directTLS.QueryRow(t.Context(), "select 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	plain := connectURL(t, h.url("postgres", "", "postgres", ""))
	if _, ok := plain.PgConn().Conn().(*tls.Conn); ok {
		t.Fatal("sslmode=disable got TLS")
	}
	// Without a certificate the proxy answers N.
	h2 := start(t, nil)
	if _, err := pgx.Connect(t.Context(), strings.Replace(h2.url("postgres", "", "postgres", ""), "sslmode=disable", "sslmode=require", 1)); err == nil {
		t.Fatal("sslmode=require succeeded against a proxy without a certificate")
	}
}

// TestAuthMethods covers {client TLS on/off} × {upstream TLS on/off} ×
// {trust, password, md5, scram-sha-256}, through pg_hba.conf edits on the
// test cluster.
func TestAuthMethods(t *testing.T) {
	c := pgcluster.ForTest(t)
	d := direct(t)
	ctx := t.Context()
	st, err := os.Stat(c.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := int(st.Sys().(*syscall.Stat_t).Uid), int(st.Sys().(*syscall.Stat_t).Gid)

	// Upstream TLS: a certificate in the data directory and ssl=on.
	selfSigned(t, c.DataDir, uid, gid)
	mustExec(t, d, "alter system set ssl = on")
	for _, sql := range []string{
		"drop role if exists trellis_pw", "drop role if exists trellis_md5", "drop role if exists trellis_scram",
		"set password_encryption = 'scram-sha-256'",
		"create role trellis_pw login password 'pw-secret'",
		"create role trellis_scram login password 'scram-secret'",
		"set password_encryption = 'md5'",
		"create role trellis_md5 login password 'md5-secret'",
		"reset password_encryption",
	} {
		mustExec(t, d, sql)
	}
	hbaPath := filepath.Join(c.DataDir, "pg_hba.conf")
	orig, err := os.ReadFile(hbaPath)
	if err != nil {
		t.Fatal(err)
	}
	rules := "host all trellis_pw 127.0.0.1/32 password\nhost all trellis_md5 127.0.0.1/32 md5\nhost all trellis_scram 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hbaPath, append([]byte(rules), orig...), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile(hbaPath, orig, 0o600)
		dd := direct(t)
		mustExec(t, dd, "alter system reset ssl")
		mustExec(t, dd, "select pg_reload_conf()")
	})
	mustExec(t, d, "select pg_reload_conf()")
	eventually(t, 10*time.Second, "pg_hba.conf reloaded", func() bool {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://trellis_md5:wrong@%s/postgres?sslmode=disable", c.Addr()))
		if err == nil {
			conn.Close(ctx)
			return false
		}
		return sqlstate(err) == "28P01"
	})

	cert, key := selfSigned(t, t.TempDir(), -1, -1)
	for _, upTLS := range []bool{false, true} {
		h := start(t, func(cfg *proxyConfig, _ *proxyOptions) {
			cfg.TLSCert, cfg.TLSKey = cert, key
			if upTLS {
				cfg.Upstream = strings.Replace(c.URL("postgres"), "sslmode=disable", "sslmode=require", 1)
			}
		})
		if upTLS {
			relayPsqlScram(t, h)
		}
		for _, clientTLS := range []bool{false, true} {
			for _, m := range []struct{ user, pw string }{{"postgres", ""}, {"trellis_pw", "pw-secret"}, {"trellis_md5", "md5-secret"}, {"trellis_scram", "scram-secret"}} {
				name := fmt.Sprintf("%s/clientTLS=%v/upstreamTLS=%v", m.user, clientTLS, upTLS)
				url := h.url(m.user, m.pw, "postgres", "")
				if clientTLS {
					url = strings.Replace(url, "sslmode=disable", "sslmode=require", 1)
				}
				conn, err := pgx.Connect(ctx, url)
				if m.user == "trellis_scram" && clientTLS && upTLS {
					// pgx sends the gs2 flag "y" over TLS: refused, with the
					// hint naming channel_binding=disable (relayPsqlScram
					// covers the "n" flag).
					var pe *pgconn.PgError
					if sqlstate(err) != "28000" || !errors.As(err, &pe) || !strings.Contains(pe.Hint, "channel_binding=disable") {
						t.Errorf("%s: want 28000 ScramOverTls with a channel_binding=disable hint, got %v", name, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				var who string
				var ssl bool
				if err := conn.QueryRow(ctx, "select current_user, coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false)").Scan(&who, &ssl); err != nil || who != m.user || ssl != upTLS {
					t.Errorf("%s: user %s ssl %v %v", name, who, ssl, err)
				}
				conn.Close(ctx)
				if m.pw != "" {
					_, err := pgx.Connect(ctx, h.url(m.user, "wrong", "postgres", ""))
					if sqlstate(err) != "28P01" {
						t.Errorf("%s wrong password: want 28P01, got %v", name, err)
					}
				}
			}
		}
	}
}

// relayPsqlScram: with TLS on both legs, libpq's channel_binding=disable
// (gs2 flag "n") authenticates through the proxy; channel_binding=prefer
// (flag "y", since the proxy offers no -PLUS) is refused with the hint.
func relayPsqlScram(t *testing.T, h *harness) {
	t.Helper()
	host, port, _ := net.SplitHostPort(h.Addr)
	run := func(binding string) (string, error) {
		conn := fmt.Sprintf("host=%s port=%s user=trellis_scram dbname=postgres sslmode=require channel_binding=%s", host, port, binding)
		cmd := exec.Command("psql", conn, "-XAtc", "select current_user || ' ' || coalesce((select ssl from pg_stat_ssl where pid = pg_backend_pid()), false)")
		cmd.Env = append(os.Environ(), "PGPASSWORD=scram-secret", "PGCONNECT_TIMEOUT=10")
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := run("disable"); err != nil || out != "trellis_scram true" {
		t.Errorf("psql channel_binding=disable over TLS on both legs: %q %v", out, err)
	}
	if out, err := run("prefer"); err == nil || !strings.Contains(out, "channel_binding=disable") {
		t.Errorf("psql channel_binding=prefer over TLS on both legs: want the refusal naming channel_binding=disable, got %q %v", out, err)
	}
}
