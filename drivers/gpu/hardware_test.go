package gpu

import "testing"

func TestNormalizeVersion(t *testing.T) {
	for in, want := range map[string]string{"9.0": "9.0.0", "550.127.05": "550.127.5", "12.4": "12.4.0", "8": "8.0.0", "535.104.05": "535.104.5"} {
		if got, err := NormalizeVersion(in); err != nil || got != want {
			t.Errorf("NormalizeVersion(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.2.3.4", "v1", "a.b"} {
		if _, err := NormalizeVersion(bad); err == nil {
			t.Errorf("NormalizeVersion(%q) accepted", bad)
		}
	}
}
