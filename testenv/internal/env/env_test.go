package env

import "testing"

func TestPerMemberDefaultAndOverrides(t *testing.T) {
	var p PerMember
	for _, v := range []string{"8", "member2=4", "eu=16"} {
		if err := p.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"member1": "8", "member2": "4", "eu": "16"} {
		if got := p.Get(name); got != want {
			t.Errorf("Get(%q) = %q, want %q", name, got, want)
		}
	}
	// A value that merely contains '=' after something that is not a member name is a default.
	var z PerMember
	_ = z.Set("a,b")
	if z.Get("x") != "a,b" {
		t.Errorf("zones default %q", z.Get("x"))
	}
}

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := freePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi, err := ephemeralRange()
	if err != nil {
		t.Skip(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p >= lo && p <= hi {
			t.Errorf("port %d is in the ephemeral range %d-%d", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("port %d twice", p)
		}
		seen[p] = true
	}
}
