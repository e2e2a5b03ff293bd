//go:build linux

package realnode

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

// The kubelet creates its chains (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY)
// in both IP families: a real node records and removes them per family.
// A chain is named "family/table/chain", "ipv6/mangle/KUBE-KUBELET-CANARY";
// a record written before families were recorded says "table/chain", for
// IPv4.
var (
	iptablesFamilies = []utiliptables.Protocol{utiliptables.ProtocolIPv4, utiliptables.ProtocolIPv6}
	iptablesTables   = []utiliptables.Table{utiliptables.TableFilter, utiliptables.TableNAT, utiliptables.TableMangle}
)

func familyName(p utiliptables.Protocol) string {
	if p == utiliptables.ProtocolIPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// chainRef is a chain of one family's table.
type chainRef struct {
	family utiliptables.Protocol
	table  utiliptables.Table
	chain  utiliptables.Chain
}

func (c chainRef) String() string {
	return familyName(c.family) + "/" + string(c.table) + "/" + string(c.chain)
}

func parseChain(s string) (chainRef, bool) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 2:
		return chainRef{utiliptables.ProtocolIPv4, utiliptables.Table(parts[0]), utiliptables.Chain(parts[1])}, true
	case len(parts) == 3 && (parts[0] == "ipv4" || parts[0] == "ipv6"):
		fam := utiliptables.ProtocolIPv4
		if parts[0] == "ipv6" {
			fam = utiliptables.ProtocolIPv6
		}
		return chainRef{fam, utiliptables.Table(parts[1]), utiliptables.Chain(parts[2])}, true
	}
	return chainRef{}, false
}

// command is how a user removes the chain by hand.
func (c chainRef) command() string {
	bin := "iptables"
	if c.family == utiliptables.ProtocolIPv6 {
		bin = "ip6tables"
	}
	return fmt.Sprintf("%s -t %s -F %s && %s -t %s -X %s", bin, c.table, c.chain, bin, c.table, c.chain)
}

// saves reads each table of each family that this host has, as
// iptables-save writes it.
func saves(ctx context.Context) map[utiliptables.Protocol]map[utiliptables.Table][]byte {
	out := map[utiliptables.Protocol]map[utiliptables.Table][]byte{}
	for _, fam := range iptablesFamilies {
		ipt := utiliptables.New(fam)
		if ipt.Present() != nil {
			continue
		}
		out[fam] = map[utiliptables.Table][]byte{}
		for _, table := range iptablesTables {
			if ctx.Err() != nil {
				return out
			}
			var buf bytes.Buffer
			if err := ipt.SaveInto(table, &buf); err == nil {
				out[fam][table] = buf.Bytes()
			}
		}
	}
	return out
}

// IptablesChains lists the host's iptables chains of both families as
// "family/table/chain", so that Cleanup removes only those the node added.
func IptablesChains(ctx context.Context) []string {
	var out []string
	for fam, tables := range saves(ctx) {
		for table, save := range tables {
			for chain := range utiliptables.GetChainsFromTable(save) {
				out = append(out, chainRef{fam, table, chain}.String())
			}
		}
	}
	slices.Sort(out)
	return out
}

// removeChains deletes the iptables chains the node recorded creating, in
// their family: flush each, delete the rules that jump to it, then delete
// it. A node whose chains were never recorded (its lab died first) removes
// none: the error names the KUBE-* chains that appeared since it started,
// and how to remove them, for the user to judge.
func removeChains(ctx context.Context, rec *HostRecord) []error {
	present := map[string]bool{}
	for _, c := range IptablesChains(ctx) {
		present[c] = true
	}
	if !rec.ChainsRecorded {
		had := map[string]bool{}
		for _, s := range rec.ChainsBefore {
			if c, ok := parseChain(s); ok {
				had[c.String()] = true
			}
		}
		var unknown, how []string
		for c := range present {
			ref, _ := parseChain(c)
			if !had[c] && strings.HasPrefix(string(ref.chain), "KUBE-") {
				unknown = append(unknown, c)
				how = append(how, ref.command())
			}
		}
		slices.Sort(unknown)
		slices.Sort(how)
		if len(unknown) > 0 {
			return []error{fmt.Errorf("the real node's lab ended before recording its iptables chains; these appeared since it started and were left: %s (if they are the lab's, remove them with: %s)",
				strings.Join(unknown, ", "), strings.Join(how, "; "))}
		}
		return nil
	}
	var created []chainRef
	for _, s := range rec.ChainsCreated {
		if c, ok := parseChain(s); ok && present[c.String()] {
			created = append(created, c)
		}
	}
	var errs []error
	for _, c := range created {
		_ = utiliptables.New(c.family).FlushChain(c.table, c.chain)
	}
	for _, c := range created {
		ipt := utiliptables.New(c.family)
		var buf bytes.Buffer
		if err := ipt.SaveInto(c.table, &buf); err != nil {
			continue
		}
		for _, line := range strings.Split(buf.String(), "\n") {
			f := strings.Fields(line)
			if len(f) >= 4 && f[0] == "-A" && f[len(f)-2] == "-j" && f[len(f)-1] == string(c.chain) {
				_ = ipt.DeleteRule(c.table, utiliptables.Chain(f[1]), f[2:]...)
			}
		}
	}
	for _, c := range created {
		if err := utiliptables.New(c.family).DeleteChain(c.table, c.chain); err != nil {
			errs = append(errs, fmt.Errorf("deleting iptables chain %s (delete it with: %s): %w", c, c.command(), err))
		}
	}
	return errs
}
