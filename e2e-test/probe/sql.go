package main

import (
	"database/sql"
	"fmt"
	"os"

	_ "modernc.org/sqlite"
)

// execSQL runs one statement against the SQLite database at path, as a
// second writer beside the agent that has it open (its WAL and locks are
// honoured; a busy database is waited for up to 10 s), and prints the
// number of rows it changed. The soak's mutation check uses it to change an
// agent's store behind the agent's back: run it as the agent's uid with the
// store's volume mounted, so no file it touches changes owner.
func execSQL(path, stmt string) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer db.Close()
	res, err := db.Exec(stmt)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	n, _ := res.RowsAffected()
	fmt.Println(n)
}
