; ptc kernel 5 fused_add_gelu_5  <- %5, %6
define void @fused_add_gelu_5(i64 %begin, i64 %end, ptr noalias %args) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %i.next, %loop ]
  ; buf9 = add(buf8, bias)
  %v0 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 0)
  ; buf10 = gelu(buf9)
  %v1 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 1)
  %i.next = add nuw i64 %i, 1
  %done = icmp eq i64 %i.next, %end
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
