package main

import "testing"

// The vectors Flotilla's Rust tests use are what KubeFed's code computes.
func TestVectorsMatchKubeFed(t *testing.T) {
	if err := checkVectors("../../tests/kubefed/version-vectors.json", false); err != nil {
		t.Fatal(err)
	}
}
