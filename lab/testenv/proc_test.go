package testenv

import (
	"os"
	"testing"
)

func TestStatusBytes(t *testing.T) {
	status := []byte("Name:\tipledger-ipam\nVmPeak:\t 1894712 kB\nVmHWM:\t   98304 kB\nVmRSS:\t   81920 kB\n")
	got, err := StatusBytes(status, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	if want := 98304.0 * 1024; got != want {
		t.Errorf("StatusBytes(VmHWM) = %v, want %v (not VmRSS or VmPeak)", got, want)
	}
	if _, err := StatusBytes([]byte("Name:\tx\nVmRSS:\t1 kB\n"), "VmHWM"); err == nil {
		t.Error("StatusBytes found VmHWM in a status without it")
	}
	if _, err := StatusBytes([]byte("VmHWM:\tmany kB\n"), "VmHWM"); err == nil {
		t.Error("StatusBytes accepted a value that is not a number")
	}
}

func TestOwnProcess(t *testing.T) {
	if _, ok := ProcCPUSeconds(os.Getpid()); !ok {
		t.Error("no CPU time for this very process")
	}
	if v, err := ProcStatusBytes(os.Getpid(), "VmRSS"); err != nil || v <= 0 {
		t.Errorf("VmRSS of this process = %v, %v", v, err)
	}
	if _, ok := ProcCPUSeconds(-1); ok {
		t.Error("CPU time for a process that cannot exist")
	}
}
