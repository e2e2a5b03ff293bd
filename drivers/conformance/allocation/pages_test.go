package allocation

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// pagedSlices serves n ResourceSlices a page of size at a time, in
// protobuf where the client accepts it, else JSON; a continue token in
// expired is answered 410 Gone, as a server answers a compacted one.
type pagedSlices struct {
	n, size int
	expired map[string]bool
	mu      sync.Mutex
	asked   []string
}

func (p *pagedSlices) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p.mu.Lock()
	p.asked = append(p.asked, q.Get("limit")+"/"+q.Get("continue"))
	p.mu.Unlock()
	if p.expired[q.Get("continue")] {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}`)
		return
	}
	start, _ := strconv.Atoi(q.Get("continue"))
	end := p.n
	if limit, _ := strconv.Atoi(q.Get("limit")); limit > 0 {
		end = min(start+limit, p.n)
	}
	l := &resourceapi.ResourceSliceList{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSliceList"}}
	if end < p.n {
		l.Continue = strconv.Itoa(end)
	}
	for i := start; i < end; i++ {
		l.Items = append(l.Items, resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("slice-%03d", i),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "driver"}}}})
	}
	if strings.Contains(r.Header.Get("Accept"), "protobuf") {
		var b bytes.Buffer
		if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(l, &b); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		_, _ = w.Write(b.Bytes())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(l)
}

// TestListPages lists 23 slices in pages of 5 from a server of protobuf
// and one of JSON: every slice once, in the server's order, managed
// fields let go, each page asked for once. A continue token that expires
// lists them again in one piece.
func TestListPages(t *testing.T) {
	defer func(size int64) { PageSize = size }(PageSize)
	PageSize = 5
	for _, tc := range []struct {
		name     string
		protobuf bool
		expired  map[string]bool
		want     []string
	}{
		{name: "protobuf", protobuf: true, want: []string{"5/", "5/5", "5/10", "5/15", "5/20"}},
		{name: "json", want: []string{"5/", "5/5", "5/10", "5/15", "5/20"}},
		{name: "expired token", protobuf: true, expired: map[string]bool{"15": true}, want: []string{"5/", "5/5", "5/10", "5/15", "/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &pagedSlices{n: 23, size: 5, expired: tc.expired}
			server := httptest.NewServer(srv)
			defer server.Close()
			cfg := &rest.Config{Host: server.URL}
			if tc.protobuf {
				cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
				cfg.ContentType = "application/vnd.kubernetes.protobuf"
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			src := rawSource(client.ResourceV1().RESTClient(), "resourceslices", "")
			if src == nil {
				t.Fatal("a client of a server has no REST client for its pages")
			}
			items := func(l *resourceapi.ResourceSliceList) ([]resourceapi.ResourceSlice, metav1.ListMeta) {
				return l.Items, l.ListMeta
			}
			got, err := listPages(context.Background(), "resourceslices", metav1.ListOptions{}, src, nil,
				pageDecoder[resourceapi.ResourceSlice](resourceapi.SchemeGroupVersion, "ResourceSliceList", items))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != srv.n {
				t.Fatalf("listed %d slices, want %d", len(got), srv.n)
			}
			for i, s := range got {
				if want := fmt.Sprintf("slice-%03d", i); s.Name != want || s.ManagedFields != nil {
					t.Fatalf("slice %d is %s with managed fields %v; want %s without", i, s.Name, s.ManagedFields, want)
				}
			}
			if fmt.Sprint(srv.asked) != fmt.Sprint(tc.want) {
				t.Errorf("pages asked (limit/continue): %v, want %v", srv.asked, tc.want)
			}
		})
	}
}

// TestContinueOf reads a protobuf page's continue token from its list
// metadata, and says it cannot for JSON.
func TestContinueOf(t *testing.T) {
	var b bytes.Buffer
	l := &resourceapi.ResourceSliceList{TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSliceList"},
		ListMeta: metav1.ListMeta{Continue: "next-page", ResourceVersion: "7"}, Items: []resourceapi.ResourceSlice{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}}
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(l, &b); err != nil {
		t.Fatal(err)
	}
	if token, ok, err := continueOf(b.Bytes()); token != "next-page" || !ok || err != nil {
		t.Errorf("protobuf: %q %v %v; want next-page", token, ok, err)
	}
	if _, ok, err := continueOf(b.Bytes()[:len(b.Bytes())/2]); ok && err == nil {
		t.Errorf("a cut page: no error")
	}
	if _, ok, _ := continueOf([]byte(`{"metadata":{"continue":"x"}}`)); ok {
		t.Errorf("JSON read as protobuf")
	}
}
