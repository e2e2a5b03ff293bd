//go:build !linux

package nicapp

import (
	"errors"
	"io"
)

// Attach needs Linux's network namespaces.
func Attach(io.Reader, Attachment) error {
	return errors.New("attaching a network interface to a container needs Linux")
}
