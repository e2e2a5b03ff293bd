package labserver

import (
	"net"
	"testing"
)

// TestAPIServerPortOutsideLocalRange: a lab's API server that picks its own
// port picks one that no outgoing connection can be given once the lab's
// process has ended, so that a resumed lab serves at its old address.
func TestAPIServerPortOutsideLocalRange(t *testing.T) {
	for _, tc := range []struct{ ephLo, ephHi, lo, hi int }{
		{32768, 60999, 10000, 32767}, // Linux's default
		{1024, 60000, 60001, 65535},  // a wide local range leaves the top
		{1024, 65000, 10000, 65535},  // and at worst any unprivileged port
	} {
		if lo, hi := servePortRange(tc.ephLo, tc.ephHi); lo != tc.lo || hi != tc.hi {
			t.Errorf("servePortRange(%d, %d) = %d-%d, want %d-%d", tc.ephLo, tc.ephHi, lo, hi, tc.lo, tc.hi)
		}
	}

	ephLo, ephHi := readLocalPortRange()
	lo, hi := servePortRange(ephLo, ephHi)
	for range 20 {
		l, err := listenAPIServer(0)
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port < lo || port > hi {
			t.Errorf("listenAPIServer(0) listens on %d, outside %d-%d (the local port range is %d-%d)", port, lo, hi, ephLo, ephHi)
		}
	}

	taken, err := listenAPIServer(0)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, err := listenAPIServer(taken.Addr().(*net.TCPAddr).Port); err == nil {
		t.Errorf("listenAPIServer on a taken port succeeded")
	}
}
