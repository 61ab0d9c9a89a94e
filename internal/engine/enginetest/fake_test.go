package enginetest

import (
	"fmt"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
)

func TestFakeConformance(t *testing.T) {
	f := NewFake()
	n := 0
	Run(t, Harness{
		Cluster: f,
		Pool:    "one",
		NewImage: func(t *testing.T) engine.Image {
			n++
			img := engine.Image{Pool: "one", Name: fmt.Sprintf("img-%d", n)}
			f.CreateImage(img)
			return img
		},
		Zombie: func(t *testing.T, img engine.Image, lock bool) engine.Addr {
			return f.Open(img, "10.0.0.9", lock)
		},
		CutOff: func(t *testing.T, a engine.Addr) { f.Hide(a) },
	})
}
