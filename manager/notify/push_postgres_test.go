package notify

import (
	"net/http"
	"testing"
	"time"

	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/registry/registrytest"
)

// On the real registry (AFFIDO_TEST_POSTGRES_DSN, a database the test may
// migrate and write), for a user with no notify URL: a push service that
// takes the push makes the notification delivered and the subscription's
// last_sent_at set; one that answers 410 Gone drops the subscription, and
// with nothing else to reach the notification fails.
func TestPostgresPushOnlyDeliveryAndGone(t *testing.T) {
	ctx := t.Context()
	store := registrytest.Store(t)
	keys, err := LoadVAPID(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		status     int
		want       string
		subsAfter  int
		lastSentAt bool
	}{
		{http.StatusCreated, "delivered", 1, true},
		{http.StatusGone, "failed", 0, false},
	} {
		t.Run(http.StatusText(c.status), func(t *testing.T) {
			user := "pgnotify-" + registry.NewToken()[:12]
			if err := store.EnsureUser(ctx, user); err != nil {
				t.Fatal(err)
			}
			session, err := store.CreateSession(ctx, user, "", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			srv, got := pushService(t, c.status)
			b := newBrowser(t)
			if _, err := store.PutPushSubscription(ctx, user, session, b.subscription(0, user, srv.URL+"/"+user), 20); err != nil {
				t.Fatal(err)
			}
			if _, err := store.EnqueueNotification(ctx, user, registry.Notification{Key: "reminder-1", Text: "stretch", Kind: "reminder"}, 100); err != nil {
				t.Fatal(err)
			}
			d := New(store, quiet(), nil) // no notify URL: ntfy's client is never used
			d.Push = &Pusher{Store: store, Client: srv.Client(), Keys: keys, Subject: "mailto:ops@example.org", Log: quiet()}
			due, err := store.DueNotifications(ctx, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range due {
				if n.UserID == user {
					d.deliver(ctx, n)
				}
			}
			if r := <-got; len(r.body) == 0 {
				t.Fatal("nothing pushed")
			}
			act, err := store.Activity(ctx, user, 10)
			if err != nil || len(act.Notifications) != 1 || act.Notifications[0].Status != c.want {
				t.Fatalf("notifications %+v %v, want %s", act.Notifications, err, c.want)
			}
			infos, err := store.PushSubscriptionInfos(ctx, user, session)
			if err != nil || len(infos) != c.subsAfter || (c.lastSentAt && infos[0].LastSentAt == nil) {
				t.Fatalf("subscriptions %+v %v", infos, err)
			}
		})
	}
}
