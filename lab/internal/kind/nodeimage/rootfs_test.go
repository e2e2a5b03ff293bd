package nodeimage

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeMmdebstrap puts an mmdebstrap first in PATH that records its
// arguments in dir/args, answers a simulated run with apt's Inst lines of
// the versions in dir/versions (failing where that file is missing: an
// archive that does not answer), and writes an empty archive as a build.
func fakeMmdebstrap(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
echo "$@" >> "` + dir + `/args"
for a in "$@"; do
  if [ "$a" = --simulate ]; then
    [ -f "` + dir + `/versions" ] || { echo "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease" >&2; exit 1; }
    while read -r name version; do echo "Inst $name ($version Debian:12.15/oldstable [amd64])"; done < "` + dir + `/versions"
    exit 0
  fi
done
prev=""
for a in "$@"; do
  if [ "$prev" = bookworm ]; then : > "$a"; exit 0; fi
  prev="$a"
done
exit 2
`
	if err := os.WriteFile(filepath.Join(dir, "mmdebstrap"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

// TestRootfsFollowsTheArchivesVersions: the root filesystem comes from
// bookworm, its updates and its security suite; its archive is named by
// the versions Debian's archive resolves its packages to, so that a
// security update (runc's, here) builds a new one, and the same versions
// reuse it. Where the archive does not answer, the one built last is used,
// saying so.
func TestRootfsFollowsTheArchivesVersions(t *testing.T) {
	ctx := context.Background()
	fake := fakeMmdebstrap(t)
	dir := t.TempDir()
	versions := filepath.Join(fake, "versions")

	// Offline, nothing built yet: the archive's error.
	if _, _, _, err := Rootfs(ctx, dir); err == nil || !strings.Contains(err.Error(), "Failed to fetch") {
		t.Fatalf("offline with no root filesystem built: %v, want the archive's error", err)
	}
	if err := os.WriteFile(versions, []byte("runc 1.1.5+ds1-1\nsystemd 252.39-1~deb12u2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first, reused, _, err := Rootfs(ctx, dir)
	if err != nil || reused {
		t.Fatalf("first build: %s, reused %v, %v", first, reused, err)
	}
	args, err := os.ReadFile(filepath.Join(fake, "args"))
	if err != nil {
		t.Fatal(err)
	}
	// Each run, the simulated ones and the build, names every source,
	// the security suite among them.
	runs := strings.Split(strings.TrimSpace(string(args)), "\n")
	if len(runs) != 3 {
		t.Errorf("mmdebstrap ran %d times, want 3 (offline, simulated, the build):\n%s", len(runs), args)
	}
	for _, run := range runs {
		if !strings.HasSuffix(run, strings.Join(DebianSources, " ")) {
			t.Errorf("mmdebstrap's run does not end with the sources %q:\n%s", DebianSources, run)
		}
	}
	if !slices.ContainsFunc(DebianSources, func(s string) bool { return strings.HasSuffix(s, " bookworm-security main") }) {
		t.Errorf("no security suite among the sources %v", DebianSources)
	}
	if got, err := os.ReadFile(strings.TrimSuffix(first, ".tar") + ".versions"); err != nil || string(got) != "runc=1.1.5+ds1-1\nsystemd=252.39-1~deb12u2\n" {
		t.Errorf("the archive's versions: %q, %v", got, err)
	}
	if again, reused, _, err := Rootfs(ctx, dir); err != nil || !reused || again != first {
		t.Errorf("the same versions: %s, reused %v, %v; want %s reused", again, reused, err, first)
	}
	if err := os.WriteFile(versions, []byte("runc 1.1.5+ds1-1+deb12u1\nsystemd 252.39-1~deb12u2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second, reused, _, err := Rootfs(ctx, dir)
	if err != nil || reused || second == first {
		t.Fatalf("after runc's security update: %s, reused %v, %v; want a new archive beside %s", second, reused, err, first)
	}

	// Offline: the archive built last, and a note saying so.
	if err := os.Remove(versions); err != nil {
		t.Fatal(err)
	}
	last, reused, note, err := Rootfs(ctx, dir)
	if err != nil || !reused || last != second || !strings.Contains(note, filepath.Base(second)) || !strings.Contains(note, "security updates") {
		t.Errorf("offline: %s, reused %v, note %q, %v; want %s with a note", last, reused, note, err, second)
	}
}

// TestParseInst reads apt's simulated installs once each, upgrades by
// their new version.
func TestParseInst(t *testing.T) {
	out := `I: running apt-get update...
Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []
Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []
Inst runc (1.1.5+ds1-1+deb12u1 Debian:12.15/oldstable, Debian-Security:12/oldstable-security [amd64])
Inst base-files [12.4+deb12u11] (12.4+deb12u12 Debian:12.15/oldstable [amd64])
Conf runc (1.1.5+ds1-1+deb12u1 Debian:12.15/oldstable [amd64])
`
	want := []string{"base-files=12.4+deb12u12", "libc6=2.36-9+deb12u14", "runc=1.1.5+ds1-1+deb12u1"}
	if got := parseInst(out); !slices.Equal(got, want) {
		t.Errorf("parseInst = %v, want %v", got, want)
	}
}

// elfFile is an ELF executable's header, with a PT_INTERP program header
// where dynamic: what checkStatic reads.
func elfFile(dynamic bool) []byte {
	const ehsize, phsize = 64, 56
	b := make([]byte, ehsize+phsize)
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1})
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2)  // ET_EXEC
	le.PutUint16(b[18:], 62) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[32:], ehsize) // e_phoff
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], 1) // e_phnum
	typ := uint32(1)        // PT_LOAD
	if dynamic {
		typ = 3 // PT_INTERP
	}
	le.PutUint32(b[ehsize:], typ)
	return b
}

// TestBusyboxComesFromTheRootfs: the pause image's busybox is the root
// filesystem's static one (merged /usr or not), never the host's; a
// dynamically linked busybox, or none, is refused, naming why.
func TestBusyboxComesFromTheRootfs(t *testing.T) {
	archive := func(entries map[string][]byte) string {
		t.Helper()
		f := filepath.Join(t.TempDir(), "rootfs.tar")
		out, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		tw := tar.NewWriter(out)
		if err := tw.WriteHeader(&tar.Header{Name: "./bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin"}); err != nil {
			t.Fatal(err)
		}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range entries {
				if !yield(k) {
					return
				}
			}
		}) {
			if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(entries[name]))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(entries[name]); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, name := range []string{"./usr/bin/busybox", "./bin/busybox"} {
		static := elfFile(false)
		dst := filepath.Join(t.TempDir(), "busybox")
		if err := Busybox(archive(map[string][]byte{"./usr/bin/jq": elfFile(true), name: static}), dst); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got, err := os.ReadFile(dst); err != nil || !slices.Equal(got, static) {
			t.Errorf("%s: wrote %d bytes, %v; want the archive's busybox", name, len(got), err)
		}
	}
	dst := filepath.Join(t.TempDir(), "busybox")
	if err := Busybox(archive(map[string][]byte{"./usr/bin/busybox": elfFile(true)}), dst); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("a dynamic busybox: %v, want it refused", err)
	}
	if _, err := os.Stat(dst); err == nil {
		t.Errorf("a refused busybox was left at %s", dst)
	}
	if err := Busybox(archive(map[string][]byte{"./usr/bin/jq": elfFile(true)}), dst); err == nil || !strings.Contains(err.Error(), "busybox-static") {
		t.Errorf("no busybox: %v, want an error naming busybox-static", err)
	}
}
