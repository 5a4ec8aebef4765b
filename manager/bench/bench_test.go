package bench

import (
	"testing"
	"time"
)

// p50 and p99 are nearest ranks: with a handful of samples p99 is the
// largest (a rank rounded down once reported the median as p99).
func TestSummarizeNearestRank(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	twoHundred := make([]int, 200)
	for i := range twoHundred {
		twoHundred[i] = i + 1
	}
	for _, c := range []struct {
		name     string
		in       []time.Duration
		p50, p99 float64
	}{
		{"one", ms(7), 7, 7},
		{"three", ms(30, 10, 20), 20, 30},
		{"ten", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 5, 10},
		{"two twoHundred", ms(twoHundred...), 100, 198},
	} {
		f := summarize(c.name, c.in)
		if f.P50ms != c.p50 || f.P99ms != c.p99 || f.Samples != len(c.in) {
			t.Errorf("%s: p50 %v p99 %v n %d, want %v %v %d", c.name, f.P50ms, f.P99ms, f.Samples, c.p50, c.p99, len(c.in))
		}
	}
}
