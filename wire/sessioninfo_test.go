package wire

import "testing"

func TestSessionInfoParams(t *testing.T) {
	var s SessionInfo
	if got := s.Param("user"); got != "" {
		t.Fatalf("empty info: Param(user) = %q", got)
	}
	if got := s.ServerParameter("client_encoding"); got != "" {
		t.Fatalf("empty info: ServerParameter = %q", got)
	}
	list, err := parseStartupParams([]byte("user\x00alice\x00database\x00\x00user\x00bob\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	s.setParams(string(list))
	for name, want := range map[string]string{"user": "bob", "database": "", "options": ""} {
		if got := s.Param(name); got != want {
			t.Errorf("Param(%q) = %q, want %q (the last value of a name sent twice)", name, got, want)
		}
	}

	set := func(name, value string) { s.setServerParameter([]byte(name), []byte(value)) }
	set("client_encoding", "UTF8")
	set("standard_conforming_strings", "on")
	set("client_encoding", "LATIN1")
	set("TimeZone", "")
	for name, want := range map[string]string{"client_encoding": "LATIN1", "standard_conforming_strings": "on", "TimeZone": "", "DateStyle": ""} {
		if got := s.ServerParameter(name); got != want {
			t.Errorf("ServerParameter(%q) = %q, want %q", name, got, want)
		}
	}
	if got, want := handleValue(s.server), "standard_conforming_strings\x00on\x00client_encoding\x00LATIN1\x00TimeZone\x00\x00"; got != want {
		t.Errorf("server list %q, want %q (one entry per name)", got, want)
	}

	// Sessions with the same values share one copy.
	var other SessionInfo
	other.setServerParameter([]byte("client_encoding"), []byte("UTF8"))
	var third SessionInfo
	third.setServerParameter([]byte("client_encoding"), []byte("UTF8"))
	if other.server != third.server {
		t.Error("equal parameter lists are not shared")
	}
}

func TestParseStartupParamsLayout(t *testing.T) {
	for _, bad := range []string{"", "user", "user\x00", "user\x00x", "user\x00x\x00", "\x00\x00", "user\x00x\x00\x00junk"} {
		if _, err := parseStartupParams([]byte(bad)); err == nil {
			t.Errorf("parseStartupParams(%q) accepted", bad)
		}
	}
	for in, want := range map[string]string{"\x00": "", "user\x00x\x00\x00": "user\x00x\x00", "a\x00\x00\x00": "a\x00\x00"} {
		got, err := parseStartupParams([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("parseStartupParams(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
