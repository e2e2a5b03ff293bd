package allocation

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	resourceapi "k8s.io/api/resource/v1"
	drcel "k8s.io/dynamic-resource-allocation/cel"
)

// A selector reads a device through the variable device only: its driver,
// whether it allows several allocations, and its attributes and capacity
// by domain and name. Where an expression reads only named values, its
// result on a device is the result on any device with the same values:
// the devices of one model on thousands of nodes differ in their UUIDs and
// PCI addresses, which a class's selector never reads. The model matches
// each alternative against every device of the cluster; it evaluates an
// expression once for each combination of the values it reads, and
// remembers the rest. An expression that reads the device in another way
// (a whole attribute map iterated, a domain chosen at run time, the device
// bound to another name) is evaluated on every device.

// deviceReads is what an expression reads of a device.
type deviceReads struct {
	driver, multi bool
	// attributes and capacity are the values read, by domain and name;
	// a name of "" reads the whole domain.
	attributes, capacity []qualified
}

type qualified struct{ domain, name string }

// The variable and fields of the device, as the DRA CEL environment
// declares them.
const (
	celDevice     = "device"
	celDriver     = "driver"
	celMulti      = "allowMultipleAllocations"
	celAttributes = "attributes"
	celCapacity   = "capacity"
)

var (
	parserOnce sync.Once
	parser     *cel.Env
	readsMu    sync.Mutex
	readsOf    = map[string]*deviceReads{}
)

// readsOfExpression says what expr reads of the device; nil where it reads
// it in a way the model does not follow, or does not parse.
func readsOfExpression(expr string) *deviceReads {
	readsMu.Lock()
	defer readsMu.Unlock()
	if r, ok := readsOf[expr]; ok {
		return r
	}
	parserOnce.Do(func() {
		parser, _ = cel.NewEnv(cel.OptionalTypes())
	})
	var r *deviceReads
	if parser != nil {
		if parsed, iss := parser.Parse(expr); iss == nil || iss.Err() == nil {
			r = &deviceReads{}
			if !r.walk(parsed.NativeRep().Expr()) {
				r = nil
			}
		}
	}
	readsOf[expr] = r
	return r
}

// walk records what e reads of the device; false where e reads it in a way
// not followed.
func (r *deviceReads) walk(e ast.Expr) bool {
	if r.read(e) {
		return true
	}
	switch e.Kind() {
	case ast.IdentKind:
		return strings.TrimPrefix(e.AsIdent(), ".") != celDevice
	case ast.LiteralKind, ast.UnspecifiedExprKind:
		return true
	case ast.SelectKind:
		return r.walk(e.AsSelect().Operand())
	case ast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() && !r.walk(c.Target()) {
			return false
		}
		for _, a := range c.Args() {
			if !r.walk(a) {
				return false
			}
		}
		return true
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			if !r.walk(el) {
				return false
			}
		}
		return true
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			m := en.AsMapEntry()
			if !r.walk(m.Key()) || !r.walk(m.Value()) {
				return false
			}
		}
		return true
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			if !r.walk(f.AsStructField().Value()) {
				return false
			}
		}
		return true
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		for _, v := range []string{c.IterVar(), c.IterVar2(), c.AccuVar()} {
			if v == celDevice {
				return false
			}
		}
		for _, part := range []ast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
			if !r.walk(part) {
				return false
			}
		}
		return true
	}
	return false
}

// read records e where it is one of the reads followed: device.driver,
// device.allowMultipleAllocations, device.attributes["domain"].name (or
// ["name"]), device.attributes["domain"] (the whole domain), the same of
// capacity; false where e is none of them.
func (r *deviceReads) read(e ast.Expr) bool {
	if e.Kind() == ast.SelectKind {
		s := e.AsSelect()
		if isDevice(s.Operand()) {
			switch s.FieldName() {
			case celDriver:
				r.driver = true
				return true
			case celMulti:
				r.multi = true
				return true
			}
			return false
		}
		if into, domain, ok := domainOf(s.Operand()); ok {
			*into(r) = append(*into(r), qualified{domain, s.FieldName()})
			return true
		}
		return false
	}
	if e.Kind() == ast.CallKind {
		if c := e.AsCall(); c.FunctionName() == operators.Index && len(c.Args()) == 2 {
			if name, ok := constString(c.Args()[1]); ok {
				if into, domain, ok := domainOf(c.Args()[0]); ok {
					*into(r) = append(*into(r), qualified{domain, name})
					return true
				}
			}
		}
	}
	if into, domain, ok := domainOf(e); ok {
		*into(r) = append(*into(r), qualified{domain, ""})
		return true
	}
	return false
}

// domainOf matches device.attributes["domain"] and device.capacity["domain"]:
// where the domain's reads go, and the domain.
func domainOf(e ast.Expr) (func(*deviceReads) *[]qualified, string, bool) {
	if e.Kind() != ast.CallKind {
		return nil, "", false
	}
	c := e.AsCall()
	if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[0].Kind() != ast.SelectKind {
		return nil, "", false
	}
	s := c.Args()[0].AsSelect()
	domain, ok := constString(c.Args()[1])
	if !ok || !isDevice(s.Operand()) {
		return nil, "", false
	}
	switch s.FieldName() {
	case celAttributes:
		return func(r *deviceReads) *[]qualified { return &r.attributes }, domain, true
	case celCapacity:
		return func(r *deviceReads) *[]qualified { return &r.capacity }, domain, true
	}
	return nil, "", false
}

func isDevice(e ast.Expr) bool {
	return e.Kind() == ast.IdentKind && strings.TrimPrefix(e.AsIdent(), ".") == celDevice
}

func constString(e ast.Expr) (string, bool) {
	if e.Kind() != ast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().Value().(string)
	return s, ok
}

// key appends to b the values of dev (of driver) that r reads, each with
// the name it has: two devices of one key give an expression reading only
// those the same result. A value is its API encoding, every field of it.
func (r *deviceReads) key(b []byte, driver string, dev *resourceapi.Device) []byte {
	b = append(b, driver...)
	b = append(b, 0)
	if r.multi && dev.AllowMultipleAllocations != nil {
		b = append(b, 'm')
		if *dev.AllowMultipleAllocations {
			b = append(b, '1')
		}
	}
	for _, q := range r.attributes {
		b = appendValues(b, 'a', q, driver, dev.Attributes, func(a resourceapi.DeviceAttribute) ([]byte, error) { return a.Marshal() })
	}
	for _, q := range r.capacity {
		b = appendValues(b, 'c', q, driver, dev.Capacity, func(c resourceapi.DeviceCapacity) ([]byte, error) { return c.Marshal() })
	}
	return b
}

// appendValues appends the values of m that q names (of its domain: all
// of them, sorted by name), as the DRA CEL environment names them: a name
// without a domain is of the driver's.
func appendValues[V any](b []byte, tag byte, q qualified, driver string, m map[resourceapi.QualifiedName]V, encode func(V) ([]byte, error)) []byte {
	add := func(name resourceapi.QualifiedName, v V) {
		enc, err := encode(v)
		if err != nil {
			// Not a value the key can hold: a key of its own, never met
			// again.
			enc = []byte(err.Error())
		}
		b = append(b, tag)
		b = append(b, name...)
		b = append(b, 0)
		b = append(b, byte(len(enc)>>8), byte(len(enc)))
		b = append(b, enc...)
	}
	if q.name != "" {
		for _, name := range []resourceapi.QualifiedName{resourceapi.QualifiedName(q.domain + "/" + q.name), resourceapi.QualifiedName(q.name)} {
			if name == resourceapi.QualifiedName(q.name) && q.domain != driver {
				continue
			}
			if v, ok := m[name]; ok {
				add(name, v)
			}
		}
		b = append(b, tag, 0)
		return b
	}
	var names []resourceapi.QualifiedName
	for name := range m {
		domain, _, found := strings.Cut(string(name), "/")
		if !found {
			domain = driver
		}
		if domain == q.domain {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		add(name, m[name])
	}
	b = append(b, tag, 0)
	return b
}

// selectorMemo remembers, per selector, the results on the devices' values
// it reads; for one goroutine.
type selectorMemo struct {
	reads []*deviceReads
	seen  []map[string]memoResult
	buf   []byte
}

type memoResult struct {
	match bool
	err   error
}

func newSelectorMemo(compiled []drcel.CompilationResult) *selectorMemo {
	m := &selectorMemo{reads: make([]*deviceReads, len(compiled)), seen: make([]map[string]memoResult, len(compiled))}
	for k, c := range compiled {
		m.reads[k] = readsOfExpression(c.Expression)
		m.seen[k] = map[string]memoResult{}
	}
	return m
}

// matches evaluates selector k of compiled on dev, or says the result it
// had on a device of the same values.
func (m *selectorMemo) matches(ctx context.Context, compiled []drcel.CompilationResult, k int, input drcel.Device, dev *resourceapi.Device) (bool, error) {
	if m == nil || m.reads[k] == nil {
		match, _, err := compiled[k].DeviceMatches(ctx, input)
		return match, err
	}
	m.buf = m.reads[k].key(m.buf[:0], input.Driver, dev)
	if r, ok := m.seen[k][string(m.buf)]; ok {
		return r.match, r.err
	}
	match, _, err := compiled[k].DeviceMatches(ctx, input)
	if ctx.Err() == nil {
		m.seen[k][string(m.buf)] = memoResult{match, err}
	}
	return match, err
}
