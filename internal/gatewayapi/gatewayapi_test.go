package gatewayapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The bodies keep the field names the agent and the manager spoke before
// they shared these types: an old agent and a new manager (or the reverse)
// still understand each other.
func TestWireFormat(t *testing.T) {
	due := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		v    any
		want string
	}{
		{Notification{Key: "k", Text: "hi", DueAt: &due}, `{"key":"k","text":"hi","due_at":"2026-11-29T15:00:00Z"}`},
		{Notification{Key: "k", Text: "hi", Kind: KindApproval, Agent: "main"}, `{"key":"k","text":"hi","due_at":null,"kind":"approval","agent":"main"}`},
		{Queued{Key: "k", Queued: true}, `{"key":"k","queued":true}`},
		{WakeAt{}, `{"at":null}`},
		{WakeAt{At: &due}, `{"at":"2026-11-29T15:00:00Z"}`},
		{Whoami{User: "alice"}, `{"user":"alice"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.v)
		if err != nil || string(b) != tt.want {
			t.Errorf("%T: %s %v, want %s", tt.v, b, err, tt.want)
		}
	}
}

func TestNotificationValid(t *testing.T) {
	tests := map[string]struct {
		n    Notification
		want bool
	}{
		"ok":            {Notification{Key: "k", Text: "t"}, true},
		"longest":       {Notification{Key: strings.Repeat("k", MaxNotifyKey), Text: strings.Repeat("t", MaxNotifyText)}, true},
		"no key":        {Notification{Text: "t"}, false},
		"no text":       {Notification{Key: "k"}, false},
		"key too long":  {Notification{Key: strings.Repeat("k", MaxNotifyKey+1), Text: "t"}, false},
		"text too long": {Notification{Key: "k", Text: strings.Repeat("t", MaxNotifyText+1)}, false},
		"kinds":         {Notification{Key: "k", Text: "t", Kind: KindJob, Agent: "worker-2"}, true},
		"unknown kind":  {Notification{Key: "k", Text: "t", Kind: "urgent"}, false},
		"bad agent":     {Notification{Key: "k", Text: "t", Agent: "../main"}, false},
		"long agent":    {Notification{Key: "k", Text: "t", Agent: "a" + strings.Repeat("b", 32)}, false},
	}
	for name, tt := range tests {
		if got := tt.n.Valid(); got != tt.want {
			t.Errorf("%s: Valid() = %v", name, got)
		}
	}
}
