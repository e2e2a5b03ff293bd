package kit

import (
	"fmt"
	"sort"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
)

// BenchmarkNodePrepareResources measures NodePrepareResources as the
// kubelet calls it (gRPC over the plugin's socket, claims read from the API)
// for claims of 1 and 8 devices, and reports p50 and p99 latency. The CDI
// spec and the checkpoint are written and synced on every call.
//
//	go test ./drivers/kit -run '^$' -bench NodePrepareResources
func BenchmarkNodePrepareResources(b *testing.B) {
	for _, devices := range []int{1, 8} {
		b.Run(fmt.Sprintf("devices=%d", devices), func(b *testing.B) {
			h := newHarness(b, devices)
			names := make([]string, devices)
			for i := range names {
				names[i] = fmt.Sprintf("gpu-%d", i)
			}
			claims := make([]*resourceapi.ResourceClaim, b.N)
			for i := range claims {
				claims[i] = h.claim(fmt.Sprintf("c%d", i), names...)
			}
			latencies := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				resp := h.prepare(claims[i])[string(claims[i].UID)]
				latencies = append(latencies, time.Since(start))
				b.StopTimer()
				if resp.Error != "" {
					b.Fatal(resp.Error)
				}
				h.unprepare(claims[i])
				b.StartTimer()
			}
			b.StopTimer()
			sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds())/1000, "ms-p50")
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds())/1000, "ms-p99")
		})
	}
}
