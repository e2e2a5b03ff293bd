//go:build !linux

package realnode

import "context"

// IptablesChains is empty where a real node cannot run.
func IptablesChains(context.Context) []string { return nil }

func removeChains(context.Context, *HostRecord) []error { return nil }
