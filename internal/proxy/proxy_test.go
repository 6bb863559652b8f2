package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writeCert(t *testing.T, dir, cn string, mod time.Time) (string, string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	kder, _ := x509.MarshalECPrivateKey(key)
	c, k := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(c, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(k, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	os.Chtimes(c, mod, mod)
	os.Chtimes(k, mod, mod)
	return c, k
}

// TestCertReload: a rotated certificate is served without a restart, and a
// broken rotation keeps the last good one.
func TestCertReload(t *testing.T) {
	dir := t.TempDir()
	c, k := writeCert(t, dir, "first", time.Now().Add(-time.Minute))
	r := &certReloader{cert: c, key: k}
	cn := func() string {
		crt, err := r.get(nil)
		if err != nil {
			t.Fatal(err)
		}
		x, _ := x509.ParseCertificate(crt.Certificate[0])
		return x.Subject.CommonName
	}
	if got := cn(); got != "first" {
		t.Fatalf("got %s", got)
	}
	writeCert(t, dir, "second", time.Now())
	if got := cn(); got != "second" {
		t.Fatalf("after rotation got %s", got)
	}
	os.WriteFile(c, []byte("garbage"), 0o600)
	if got := cn(); got != "second" {
		t.Fatalf("after a broken rotation got %s", got)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		flag string
	}{
		{func(c *Config) { c.Listen = "nope" }, "listen"},
		{func(c *Config) { c.Listen = "0.0.0.0:6432" }, "listen"},
		{func(c *Config) { c.Staging = "maybe" }, "staging"},
		{func(c *Config) { c.Upstream = "postgres://a@b/c?sslmode=bogus" }, "upstream"},
		{func(c *Config) { c.PoolMaxSize = 0 }, "pool-max-size"},
		{func(c *Config) { c.InstanceID = 2048 }, "instance-id"},
		{func(c *Config) { c.CancelPeers = "2=127.0.0.1:6433" }, "cancel-peers"},
		{func(c *Config) { c.InstanceID, c.CancelPeers = 1, "1=127.0.0.1:6433" }, "cancel-peers"},
		{func(c *Config) { c.InstanceID, c.CancelPeers = 1, "2=nohostport" }, "cancel-peers"},
	} {
		cfg := Default()
		c.mod(&cfg)
		err := cfg.Validate()
		fe, ok := err.(*FlagError)
		if !ok || fe.Flag != c.flag {
			t.Errorf("want an error naming --%s, got %v", c.flag, err)
		}
	}
	cfg := Default()
	cfg.Listen, cfg.EmbeddedPassword = "0.0.0.0:6432", "pw"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg = Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.InstanceID, cfg.CancelPeers = 1, "2=10.0.0.2:6432, 3=[::1]:6432"
	if peers, err := cfg.cancelPeers(); err != nil || len(peers) != 2 || peers[3] != "[::1]:6432" {
		t.Fatalf("cancel peers: %v %v", peers, err)
	}
}
