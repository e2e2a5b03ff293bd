package allocation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// A large list (the slices of thousands of nodes) is most of a reading's
// time, and most of that is decoding it. Read fetches the pages of the
// large lists as the API server sends them and decodes each beside the
// fetching of the next: in protobuf, the continue token is read from the
// page's list metadata alone, without decoding its items. A page in JSON
// (a server that does not speak protobuf) is decoded before the next is
// asked for; so is every page of a client that is not a REST client (a
// fake's).

// rawList is where the pages of a list come from as bytes: a REST client
// of the resource's group and version, the resource, and the namespace
// ("" for every namespace, or a resource of the cluster).
type rawList struct {
	client    rest.Interface
	resource  string
	namespace string
}

// rawSource is the REST client of a typed client's group, where it is one
// that speaks to a server; nil for a fake's.
func rawSource(client rest.Interface, resource, namespace string) *rawList {
	if !speaksToAServer(client) {
		return nil
	}
	return &rawList{client: client, resource: resource, namespace: namespace}
}

// speaksToAServer tells whether a typed client's REST client is one (a
// fake's is a nil *rest.RESTClient).
func speaksToAServer(client rest.Interface) bool {
	c, ok := client.(*rest.RESTClient)
	return client != nil && (!ok || c != nil)
}

func (r *rawList) fetch(ctx context.Context, opts metav1.ListOptions) ([]byte, error) {
	res := r.client.Get().Namespace(r.namespace).Resource(r.resource).VersionedParams(&opts, scheme.ParameterCodec).Do(ctx)
	page, err := res.Raw()
	if err != nil {
		// The server's Status, where it sent one (410 Expired).
		return nil, res.Error()
	}
	return page, nil
}

// listPages lists every object of a resource, a page at a time, decoding
// pages beside the fetching of the next where src serves protobuf; with
// no src, typed lists each page (listAll). decode turns a page into its
// items and list metadata; it runs on several pages at once.
func listPages[T any](ctx context.Context, resource string, opts metav1.ListOptions, src *rawList,
	typed func(context.Context, metav1.ListOptions) ([]T, string, error), decode func([]byte) ([]T, metav1.ListMeta, error)) ([]T, error) {
	if src == nil {
		return listAll(ctx, resource, opts, typed)
	}
	items, err := fetchPages(ctx, opts, src, decode)
	if apierrors.IsResourceExpired(err) {
		// The continue token expired (the server compacted past it):
		// the list again, in one piece, as client-go's pager does.
		opts.Limit = 0
		var page []byte
		if page, err = src.fetch(ctx, opts); err == nil {
			items, _, err = decode(page)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", resource, err)
	}
	for i := range items {
		if o, ok := any(&items[i]).(metav1.Object); ok {
			o.SetManagedFields(nil)
		}
	}
	return items, nil
}

// fetchPages fetches the pages of a list in order and decodes them, up to
// GOMAXPROCS at a time, while it fetches the next.
func fetchPages[T any](ctx context.Context, opts metav1.ListOptions, src *rawList, decode func([]byte) ([]T, metav1.ListMeta, error)) ([]T, error) {
	opts.Limit = PageSize
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	var (
		mu    sync.Mutex
		pages [][]T
	)
	keep := func(i int, items []T) {
		mu.Lock()
		defer mu.Unlock()
		pages[i] = items
	}
	for i := 0; ; i++ {
		page, err := src.fetch(gctx, opts)
		if err != nil {
			if werr := g.Wait(); werr != nil && !errors.Is(werr, context.Canceled) {
				return nil, werr
			}
			return nil, err
		}
		mu.Lock()
		pages = append(pages, nil)
		mu.Unlock()
		next, ok, err := continueOf(page)
		if err != nil {
			_ = g.Wait()
			return nil, err
		}
		if !ok {
			// Not protobuf: its token is known once it is decoded.
			items, meta, err := decode(page)
			if err != nil {
				_ = g.Wait()
				return nil, err
			}
			keep(i, items)
			next = meta.Continue
		} else {
			g.Go(func() error {
				items, _, err := decode(page)
				if err != nil {
					return err
				}
				keep(i, items)
				return nil
			})
		}
		if next == "" {
			break
		}
		opts.Continue = next
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(pages...), nil
}

// protobufPrefix starts every object the API server sends in protobuf.
var protobufPrefix = []byte("k8s\x00")

// continueOf reads the continue token of a page in protobuf from its list
// metadata alone (the envelope's raw object, field 2; the list's metadata,
// field 1, in every list of the API); ok is false for a page in another
// encoding.
func continueOf(page []byte) (token string, ok bool, err error) {
	envelope, isProto := bytes.CutPrefix(page, protobufPrefix)
	if !isProto {
		return "", false, nil
	}
	list, err := protoField(envelope, 2)
	if err != nil {
		return "", true, fmt.Errorf("a page in protobuf: %w", err)
	}
	raw, err := protoField(list, 1)
	if err != nil {
		return "", true, fmt.Errorf("a page in protobuf: its list metadata: %w", err)
	}
	var meta metav1.ListMeta
	if err := meta.Unmarshal(raw); err != nil {
		return "", true, fmt.Errorf("a page in protobuf: its list metadata: %w", err)
	}
	return meta.Continue, true, nil
}

// protoField is the bytes of the first field number num of a protobuf
// message; none where the message lacks it.
func protoField(msg []byte, num protowire.Number) ([]byte, error) {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return nil, protowire.ParseError(l)
			}
			return v, nil
		}
		l = protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		msg = msg[l:]
	}
	return nil, nil
}

// decodeList decodes a page, in protobuf or JSON, into list.
func decodeList(page []byte, list kruntime.Object, gvk schema.GroupVersionKind) error {
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(page, &gvk, list); err != nil {
		return fmt.Errorf("decoding a page of %s: %w", gvk.Kind, err)
	}
	return nil
}

// pageDecoder decodes a page of a list of kind L (of group version gv)
// into its items, which items takes from it (and may trim as it does).
func pageDecoder[T any, L any, PL interface {
	*L
	kruntime.Object
}](gv schema.GroupVersion, kind string, items func(*L) ([]T, metav1.ListMeta)) func([]byte) ([]T, metav1.ListMeta, error) {
	return func(page []byte) ([]T, metav1.ListMeta, error) {
		var l L
		if err := decodeList(page, PL(&l), gv.WithKind(kind)); err != nil {
			return nil, metav1.ListMeta{}, err
		}
		got, meta := items(&l)
		return got, meta, nil
	}
}
