//go:build !cgo

package nvmllib

import (
	"errors"
	"testing"
)

func TestOpenWithoutCgoSaysWhy(t *testing.T) {
	for _, source := range []string{"", "nvml", "mock:dgxh100"} {
		if l, err := Open(source, WithNode("n")); l != nil || !errors.Is(err, ErrNoCgo) {
			t.Errorf("Open(%q) = %v, %v; want %v", source, l, err, ErrNoCgo)
		}
	}
}
